/* libwallprof's flame graph, part 2: the page. Draws the call tree of
 * data.js on a canvas (one rectangle a node, so a hundred thousand stay
 * fast), the timeline strip, the side panel, and handles zoom, search,
 * the filters and the keyboard. window.wallprof is a small API over the
 * same actions (the tests drive the page through it). */
(function () {
  const $ = id => document.getElementById(id);
  const ROW = 18, BOX = 17, MIN_W = 0.4, TEXT_W = 26;
  const ON = [242, 140, 55], OFF = [90, 150, 220], SYS = [72, 178, 172], HIT = [232, 72, 232];

  let P = null, B = null;
  const sel = new WP.Selection();
  let inverted = false, diff = true, zoom = 0, query = null;
  let tree, sums, bTree = null, bSums = null, baseOf = null, maxDelta = 0;
  let hitKey = new Map(), matched = 0;
  let drawn = [], rows = new Map();
  let drag = null;

  /* ---- state -------------------------------------------------------- */

  function baseSelection() {
    const s = new WP.Selection();
    s.on = sel.on;
    s.off = sel.off;
    if (sel.threads) {
      const names = new Set([...sel.threads].map(i => P.threads[i].name));
      s.threads = new Set(B.threads.filter(t => names.has(t.name)).map(t => t.index));
    }
    return s;
  }

  function recompute() {
    tree = WP.tree(P, inverted);
    sums = WP.sum(tree, sel);
    if (zoom >= tree.size || !sums.total[zoom]) zoom = 0;
    bTree = bSums = baseOf = null;
    maxDelta = 0;
    if (B && diff) {
      bTree = WP.tree(B, inverted);
      bSums = WP.sum(bTree, baseSelection());
      baseOf = WP.overlay(tree, bTree);
      for (let n = 1; n < tree.size; n++) {
        const d = Math.abs(delta(n));
        if (d > maxDelta) maxDelta = d;
      }
    }
    searchSums();
  }

  function share(n) {
    return sums.total[0] ? sums.total[n] / sums.total[0] : 0;
  }

  function baseShare(n) {
    if (!baseOf || baseOf[n] < 0 || !bSums.total[0]) return 0;
    return bSums.total[baseOf[n]] / bSums.total[0];
  }

  function delta(n) {
    return share(n) - baseShare(n);
  }

  function isHit(n) {
    if (!query || n === 0) return false;
    const k = tree.key[n];
    let h = hitKey.get(k);
    if (h === undefined) {
      h = query.test(WP.keyLabel(k));
      hitKey.set(k, h);
    }
    return h;
  }

  /* Samples with a matching frame, each once. */
  function searchSums() {
    matched = 0;
    if (!query) return;
    const covered = new Uint8Array(tree.size);
    for (let n = 1; n < tree.size; n++) {
      const p = tree.parent[n];
      if (covered[p]) covered[n] = 1;
      else if (isHit(n)) {
        covered[n] = 1;
        matched += sums.total[n];
      }
    }
  }

  function setQuery(text) {
    hitKey = new Map();
    query = null;
    $("search").classList.remove("bad");
    if (text) {
      const flags = /[A-Z]/.test(text) ? "" : "i";
      try {
        query = new RegExp(text, flags);
      } catch (e) {
        $("search").classList.add("bad");
        query = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), flags);
      }
    }
    searchSums();
  }

  /* ---- drawing ------------------------------------------------------ */

  function mix(a, b, f) {
    return [0, 1, 2].map(i => Math.round(a[i] + (b[i] - a[i]) * f));
  }

  function jitter(k) {
    const s = WP.keyNames[k];
    let h = 0;
    for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return ((h >>> 0) % 21) / 100 - 0.1;
  }

  function colour(n) {
    if (n === 0) return [200, 200, 200];
    if (isHit(n)) return HIT;
    const k = tree.key[n];
    if (bTree) {
      const d = delta(n), f = maxDelta ? Math.min(1, Math.abs(d) / maxDelta) : 0;
      if (f < 0.02) return [225, 225, 225];
      return mix([240, 240, 240], d > 0 ? [222, 45, 38] : [49, 100, 215], 0.25 + 0.75 * f);
    }
    if (WP.isSysKey(k)) return SYS;
    const onf = sums.total[n] ? sums.on[n] / sums.total[n] : 0;
    let c = mix(OFF, ON, onf);
    const j = jitter(k);
    c = j > 0 ? mix(c, [255, 255, 255], j * 2) : mix(c, [0, 0, 0], -j);
    const f = tree.frame[n] >= 0 ? tree.p.fKind[tree.frame[n]] : 0;
    if (f & WP.UNKNOWN) c = mix(c, [160, 160, 160], 0.6);
    return c;
  }

  function graphY(depth, height) {
    return inverted ? depth * ROW : height - (depth + 1) * ROW;
  }

  function drawGraph() {
    const cv = $("graph"), box = $("graph-box");
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(200, box.clientWidth - 20);
    const H = (tree.maxDepth + 1) * ROW + 2;
    cv.style.height = H + "px";
    cv.width = Math.round(W * dpr);
    cv.height = Math.round(H * dpr);
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    g.font = "12px system-ui, sans-serif";
    g.textBaseline = "middle";
    const cw = g.measureText("abcdefghijklmnopqrstuvwxyz_").width / 27;
    drawn = [];
    rows = new Map();
    const put = (n, x, w, dim) => {
      const y = graphY(tree.depth[n], H);
      const c = colour(n);
      g.globalAlpha = dim ? 0.45 : 1;
      g.fillStyle = "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
      g.fillRect(x, y, Math.max(w - 0.5, 0.5), BOX);
      if (w >= TEXT_W) {
        let s = n === 0 ? rootLabel() : WP.keyLabel(tree.key[n]);
        const fit = Math.floor((w - 6) / cw);
        if (s.length > fit) s = fit > 2 ? s.slice(0, fit - 1) + "\u2026" : "";
        if (s) {
          g.fillStyle = "#111";
          g.fillText(s, x + 3, y + BOX / 2 + 1);
        }
      }
      g.globalAlpha = 1;
      const d = { n, x, w, y };
      drawn.push(d);
      const r = Math.floor(y / ROW);
      if (!rows.has(r)) rows.set(r, []);
      rows.get(r).push(d);
    };
    if (!sums.total[0]) {
      g.fillStyle = "#666";
      g.fillText("No samples in this selection.", 10, 20);
      return;
    }
    for (let a = tree.parent[zoom]; a >= 0; a = tree.parent[a]) put(a, 0, W, true);
    const scale = W / sums.total[zoom];
    const stack = [[zoom, 0]];
    while (stack.length) {
      const [n, x] = stack.pop();
      const w = sums.total[n] * scale;
      put(n, x, w, false);
      let cx = x;
      for (const c of tree.kids[n]) {
        const cwid = sums.total[c] * scale;
        if (cwid >= MIN_W) stack.push([c, cx]);
        cx += cwid;
      }
    }
  }

  function rootLabel() {
    return "all (" + fmtCount(sums.total[0]) + " samples)";
  }

  function drawTimeline() {
    const cv = $("timeline");
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(200, cv.clientWidth), H = 56;
    cv.width = Math.round(W * dpr);
    cv.height = Math.round(H * dpr);
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const ts = new WP.Selection();
    ts.threads = sel.threads;
    const tl = WP.timeline(P, ts, Math.floor(W / 3));
    let max = 1;
    for (let i = 0; i < tl.n; i++) max = Math.max(max, tl.on[i] + tl.off[i]);
    const bw = W / tl.n, top = 12, h = H - top - 2;
    for (let i = 0; i < tl.n; i++) {
      const hOff = (tl.off[i] / max) * h, hOn = (tl.on[i] / max) * h;
      g.globalAlpha = sel.off ? 1 : 0.25;
      g.fillStyle = "rgb(" + OFF.join(",") + ")";
      g.fillRect(i * bw, H - 2 - hOff, Math.max(bw - 0.5, 0.5), hOff);
      g.globalAlpha = sel.on ? 1 : 0.25;
      g.fillStyle = "rgb(" + ON.join(",") + ")";
      g.fillRect(i * bw, H - 2 - hOff - hOn, Math.max(bw - 0.5, 0.5), hOn);
    }
    g.globalAlpha = 1;
    /* A mark every second (every 5 s or more when crowded). */
    const secs = P.ticks / P.hz;
    let step = 1;
    while ((secs / step) * 40 > W) step *= step === 1 ? 5 : 2;
    g.fillStyle = "#555";
    g.font = "10px system-ui, sans-serif";
    g.textBaseline = "top";
    for (let s = 0; s <= secs; s += step) {
      const x = ((s * P.hz) / P.ticks) * W;
      g.fillRect(x, 0, 1, 4);
      g.fillText(s + " s", x + 2, 0);
    }
    const a = drag ? Math.min(drag.a, drag.b) : (sel.from / P.ticks) * W;
    const b = drag ? Math.max(drag.a, drag.b) : (Math.min(sel.to, P.ticks) / P.ticks) * W;
    if (drag || sel.from > 0 || sel.to < P.ticks) {
      g.fillStyle = "rgba(40,40,60,0.28)";
      g.fillRect(0, top, a, H - top);
      g.fillRect(b, top, W - b, H - top);
      g.strokeStyle = "#333";
      g.strokeRect(a + 0.5, top + 0.5, Math.max(b - a - 1, 1), H - top - 1);
    }
  }

  function fmtCount(n) {
    return Math.round(n).toLocaleString("en-US");
  }

  function fmtTime(samples, p) {
    const s = (samples * (p || P).periodNs) / 1e9;
    return s >= 1 ? s.toFixed(2) + " s" : (s * 1000).toFixed(1) + " ms";
  }

  function pct(x) {
    return (100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 2) + "%";
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }

  function drawSide() {
    const t = sums.total[0], on = sums.on[0];
    const range = sel.from > 0 || sel.to < P.ticks
      ? ((sel.from / P.hz).toFixed(2) + "\u2013" + (Math.min(sel.to, P.ticks) / P.hz).toFixed(2) + " s")
      : "whole profile";
    const th = sel.threads ? [...sel.threads].map(i => P.threads[i].name + " (" + P.threads[i].tid + ")").join(", ")
      : "all " + P.threads.length + " threads, merged";
    $("summary").innerHTML =
      "<div><span class=k>samples</span> " + fmtCount(t) + " (" + fmtTime(t) + " of thread time)</div>" +
      "<div><span class=k>on-CPU</span> " + (t ? pct(on / t) : "-") + " \u00b7 <span class=k>off-CPU</span> " +
      (t ? pct((t - on) / t) : "-") + "</div>" +
      "<div><span class=k>time</span> " + range + "</div>" +
      "<div><span class=k>threads</span> " + esc(th) + "</div>" +
      (query ? "<div><span class=k>search</span> " + pct(t ? matched / t : 0) + " matched</div>" : "") +
      (B ? "<div><span class=k>diff</span> against a base of " + fmtCount(B.nrSamples) + " samples</div>" : "");
    const off = WP.bySyscall(P, sel);
    const totOff = off.reduce((a, r) => a + r[1], 0);
    $("syscalls").tBodies[0].innerHTML = off.length
      ? off.slice(0, 40).map(r => "<tr data-sys=\"" + esc(r[0]) + "\"><td>" + esc(r[0]) + "</td><td class=n>" +
        fmtCount(r[1]) + "</td><td class=n>" + pct(r[1] / totOff) + "</td></tr>").join("")
      : "<tr><td>no off-CPU samples</td></tr>";
  }

  function drawStatus() {
    const lost = P.d.lost || {};
    const parts = [P.title ? esc(P.title) : "", "pid " + P.d.pid, P.hz + " Hz",
      (P.ticks / P.hz).toFixed(2) + " s", fmtCount(P.nrSamples) + " samples",
      P.threads.length + " threads"];
    const l = Object.keys(lost).filter(k => lost[k]).map(k => k.replace("_", " ") + " " + fmtCount(lost[k]));
    if (l.length) parts.push("lost or partial: " + l.join(", "));
    $("status").innerHTML = parts.filter(Boolean).join(" \u00b7 ");
    $("match").textContent = query ? "Matched: " + pct(sums.total[0] ? matched / sums.total[0] : 0) : "";
  }

  function render() {
    recompute();
    drawGraph();
    drawTimeline();
    drawSide();
    drawStatus();
  }

  /* ---- hover and click ---------------------------------------------- */

  function nodeAt(ev) {
    const cv = $("graph"), r = cv.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const row = rows.get(Math.floor(y / ROW));
    if (!row) return null;
    for (const d of row) if (x >= d.x && x < d.x + Math.max(d.w, 1) && y - d.y <= BOX) return d.n;
    return null;
  }

  function describe(n) {
    const k = tree.key[n], t = sums.total[n], on = sums.on[n];
    const f = tree.frame[n];
    const p = tree.p;
    let h = "<b>" + esc(n === 0 ? "all samples" : WP.keyLabel(k)) + "</b>";
    if (f >= 0) {
      const file = p.strings[p.fFile[f]], mod = p.strings[p.fMod[f]];
      if (file) h += "<div><span class=k>at</span> " + esc(file) + (p.fLine[f] ? ":" + p.fLine[f] : "") + "</div>";
      if (mod) h += "<div><span class=k>module</span> " + esc(mod) + "</div>";
      if (p.fKind[f] & WP.INLINED) h += "<div><span class=k>inlined</span></div>";
    } else if (n && WP.isSysKey(k)) {
      h += "<div><span class=k>off-CPU, blocked in this system call</span></div>";
    }
    h += "<div><span class=k>samples</span> " + fmtCount(t) + " (" + fmtTime(t) + "), " + pct(share(n)) + " of the selection";
    if (zoom && n !== zoom && sums.total[zoom]) h += ", " + pct(t / sums.total[zoom]) + " of the zoomed frame";
    h += "</div><div><span class=k>on-CPU</span> " + fmtCount(on) + " (" + (t ? pct(on / t) : "-") +
      ") \u00b7 <span class=k>off-CPU</span> " + fmtCount(t - on) + " (" + (t ? pct((t - on) / t) : "-") + ")</div>";
    if (bTree) {
      const d = delta(n);
      h += "<div><span class=k>base</span> " + pct(baseShare(n)) + " \u2192 " + pct(share(n)) + " (" +
        (d >= 0 ? "+" : "") + (100 * d).toFixed(2) + " points)</div>";
    }
    return h;
  }

  function onMove(ev) {
    const n = nodeAt(ev), tip = $("tip");
    if (n === null) {
      tip.hidden = true;
      return;
    }
    tip.innerHTML = describe(n);
    tip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 6);
    const y = ev.clientY + 16 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 8 : ev.clientY + 16;
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = Math.max(0, y) + "px";
  }

  function onClick(ev) {
    const n = nodeAt(ev);
    if (n === null) return;
    zoom = n;
    render();
  }

  /* ---- the timeline: drag to select a time range --------------------- */

  function tlX(ev) {
    const r = $("timeline").getBoundingClientRect();
    return Math.max(0, Math.min(r.width, ev.clientX - r.left));
  }

  function tlDown(ev) {
    drag = { a: tlX(ev), b: tlX(ev) };
    ev.preventDefault();
  }

  function tlMove(ev) {
    if (!drag) return;
    drag.b = tlX(ev);
    drawTimeline();
  }

  function tlUp() {
    if (!drag) return;
    const W = $("timeline").getBoundingClientRect().width;
    const a = Math.min(drag.a, drag.b), b = Math.max(drag.a, drag.b);
    drag = null;
    if (b - a < 3) api.selectTicks(0, Infinity);
    else api.selectTicks(Math.floor((a / W) * P.ticks), Math.ceil((b / W) * P.ticks));
  }

  /* ---- set up --------------------------------------------------------- */

  function fillThreads() {
    const s = $("thread");
    const opt = (v, t) => {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = t;
      s.appendChild(o);
    };
    opt("all", "All threads, merged (" + P.threads.length + ")");
    [...P.threads].sort((a, b) => b.samples - a.samples)
      .forEach(t => opt(String(t.tid), (t.name || "?") + " (" + t.tid + ") \u2014 " + fmtCount(t.samples)));
  }

  const api = {
    ready: false,
    error: null,
    /* Labels of the frames drawn, once each. */
    labels: () => [...new Set(drawn.map(d => (d.n === 0 ? "all" : WP.keyLabel(tree.key[d.n]))))],
    search: text => {
      $("search").value = text || "";
      setQuery(text);
      render();
      return api.matched();
    },
    matched: () => (sums.total[0] ? (100 * matched) / sums.total[0] : 0),
    selected: () => sums.total[0],
    onCpu: () => sums.on[0],
    threads: () => P.threads.map(t => ({ tid: t.tid, name: t.name, samples: t.samples })),
    setThread: tid => {
      const i = P.threads.findIndex(t => String(t.tid) === String(tid));
      sel.threads = tid === "all" || i < 0 ? null : new Set([i]);
      $("thread").value = sel.threads ? String(tid) : "all";
      render();
    },
    setStates: (on, off) => {
      sel.on = !!on;
      sel.off = !!off;
      $("show-on").checked = sel.on;
      $("show-off").checked = sel.off;
      render();
    },
    selectTicks: (a, b) => {
      sel.from = Math.max(0, a);
      sel.to = b >= P.ticks ? Infinity : b;
      render();
    },
    ticks: () => P.ticks,
    setInvert: on => {
      inverted = !!on;
      $("invert").checked = inverted;
      zoom = 0;
      render();
    },
    setDiff: on => {
      diff = !!on;
      $("diff").checked = diff;
      document.body.classList.toggle("diff", !!(B && diff));
      render();
    },
    zoomTo: label => {
      const n = drawn.find(d => d.n && WP.keyLabel(tree.key[d.n]) === label);
      zoom = n ? n.n : 0;
      render();
      return !!n;
    },
    /* "gain", "loss" or "same" for the widest drawn frame called `label`
     * in the diff view; null when it is not drawn. */
    diffOf: label => {
      let best = null;
      for (const d of drawn) if (d.n && WP.keyLabel(tree.key[d.n]) === label && (!best || d.w > best.w)) best = d;
      if (!best) return null;
      if (!bTree) return "none";
      const d = delta(best.n), f = maxDelta ? Math.abs(d) / maxDelta : 0;
      return f < 0.02 ? "same" : d > 0 ? "gain" : "loss";
    },
    colourOf: label => {
      const d = drawn.find(x => x.n && WP.keyLabel(tree.key[x.n]) === label);
      return d ? colour(d.n) : null;
    },
    syscalls: () => WP.bySyscall(P, sel),
    reset: () => {
      zoom = 0;
      sel.from = 0;
      sel.to = Infinity;
      $("search").value = "";
      setQuery("");
      render();
    },
  };
  window.wallprof = api;

  function start() {
    P = new WP.Profile(JSON.parse($("wp-data").textContent));
    const bt = $("wp-base").textContent.trim();
    if (bt && bt !== "null") B = new WP.Profile(JSON.parse(bt));
    document.title = "wallprof" + (B ? " diff" : "") + ": " + (P.title || "pid " + P.d.pid);
    $("title").textContent = P.title || "pid " + P.d.pid;
    $("title").title = P.title;
    $("diff-box").hidden = !B;
    document.body.classList.toggle("diff", !!B);
    fillThreads();
    $("thread").addEventListener("change", e => api.setThread(e.target.value));
    $("show-on").addEventListener("change", e => api.setStates(e.target.checked, sel.off));
    $("show-off").addEventListener("change", e => api.setStates(sel.on, e.target.checked));
    $("invert").addEventListener("change", e => api.setInvert(e.target.checked));
    $("diff").addEventListener("change", e => api.setDiff(e.target.checked));
    $("search").addEventListener("input", e => {
      setQuery(e.target.value);
      render();
    });
    $("reset").addEventListener("click", api.reset);
    $("syscalls").addEventListener("click", e => {
      const tr = e.target.closest("tr[data-sys]");
      if (tr && tr.dataset.sys[0] !== "(") api.search("^\\[" + tr.dataset.sys + "\\]$");
    });
    const cv = $("graph");
    cv.addEventListener("mousemove", onMove);
    cv.addEventListener("mouseleave", () => ($("tip").hidden = true));
    cv.addEventListener("click", onClick);
    $("timeline").addEventListener("mousedown", tlDown);
    window.addEventListener("mousemove", tlMove);
    window.addEventListener("mouseup", tlUp);
    window.addEventListener("resize", () => render());
    document.addEventListener("keydown", e => {
      const typing = e.target === $("search");
      if (e.key === "/" && !typing) {
        e.preventDefault();
        $("search").focus();
        $("search").select();
      } else if (e.key === "Escape") {
        if (typing) $("search").blur();
        api.reset();
      }
    });
    render();
    api.ready = true;
  }

  try {
    start();
  } catch (e) {
    api.error = String(e && e.message ? e.message : e);
    $("status").textContent = "Cannot show this profile: " + api.error;
    throw e;
  }
})();
