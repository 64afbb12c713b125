"""A plugin (test/progs/libwpt_plugin.c) that test/progs/plugins.c dlopens,
runs and dlcloses before it exits: its frames still resolve in the exit
profile (the module map is recorded at capture time)."""

import os


def tests(rt):
    check = rt.check

    def test_dlclosed_plugin(tmp):
        """A plugin dlclose'd before exit still resolves (module map recorded at
        capture time)."""
        plugin = os.path.join(rt.PROGS, "libwpt_plugin.so")
        r = rt.run_under_preload([rt.prog("plugins"), plugin], cwd=tmp)
        check(r.rc == 0, "plugins: %s" % r.describe())
        check("plugin: unloaded" in r.stdout, "the plugin was not unloaded: %r" % r.stdout)
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        frames = rt.profile_part(obj)["frames"]
        hits = [f for f in frames if f.get("function") == "wpt_plugin_work"]
        check(hits, "no frame wpt_plugin_work; functions: %s"
              % sorted({str(f.get("function")) for f in frames})[:12])
        check(all(str(f.get("module", "")).endswith("libwpt_plugin.so") for f in hits),
              "wpt_plugin_work frames have module %s" % {f.get("module") for f in hits})
        check(any(h.get("filename") == "libwpt_plugin.c" and h.get("lineno") for h in hits),
              "wpt_plugin_work has no file:line")
        images = obj.get("debug_meta", {}).get("images", [])
        check(any(i.get("code_file", "").endswith("libwpt_plugin.so") and i.get("debug_id")
                  for i in images), "no debug image for the unloaded plugin")
        fns = {f.get("function") for f in frames}
        check("wpt_after_unload" in fns, "no samples after the unload")

    return [
        ("dlclosed_plugin", test_dlclosed_plugin),
    ]
