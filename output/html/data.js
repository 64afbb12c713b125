"use strict";
/* libwallprof's flame graph, part 1: the profile's data (decoded as
 * output/html_data.h describes it), the call trees built from it and the
 * sums over a selection (threads, on/off-CPU, a time range). No drawing
 * here: view.js draws and handles the page. */

const WP = {};

/* Numbers packed 5 bits a character, the low bits first (html_data.h). */
WP.PACK_END = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
WP.PACK_MORE = "ghijklmnopqrstuvwxyz0123456789-_";
WP.DIGIT = (function () {
  const t = new Int8Array(128).fill(-1);
  for (let i = 0; i < 32; i++) {
    t[WP.PACK_END.charCodeAt(i)] = i;
    t[WP.PACK_MORE.charCodeAt(i)] = 32 + i;
  }
  return t;
})();

WP.unpack = function (str) {
  const out = [];
  let v = 0, scale = 1;
  for (let i = 0; i < str.length; i++) {
    const c = str.charCodeAt(i);
    const d = c < 128 ? WP.DIGIT[c] : -1;
    if (d < 0) throw new Error("bad packed number at " + i);
    if (d < 32) {
      out.push(v + d * scale);
      v = 0;
      scale = 1;
    } else {
      v += (d - 32) * scale;
      scale *= 32;
    }
  }
  return out;
};

/* Frame kinds (html_data.h's WP_HTML_FRAME_*). */
WP.INLINED = 1;
WP.UNKNOWN = 2;
WP.APP = 4;

/* Keys shared by every profile on the page, so that a base profile's trees
 * can be laid over this one's: a function is its name and module. */
WP.keys = new Map();
WP.keyNames = [];
WP.keyOf = function (s) {
  let k = WP.keys.get(s);
  if (k === undefined) {
    k = WP.keyNames.length;
    WP.keys.set(s, k);
    WP.keyNames.push(s);
  }
  return k;
};

/* A decoded profile. */
WP.Profile = function (d) {
  if (!d || d.format !== "wallprof-html") throw new Error("not a wallprof profile");
  this.d = d;
  this.title = d.title || "";
  this.hz = d.hz || 101;
  this.periodNs = d.period_ns || Math.round(1e9 / this.hz);
  this.ticks = d.ticks || 0;
  this.strings = d.strings;
  this.syscalls = d.syscalls || [];
  const fr = d.frames, nf = fr.length / 5;
  this.nrFrames = nf;
  this.fName = new Int32Array(nf);
  this.fFile = new Int32Array(nf);
  this.fLine = new Int32Array(nf);
  this.fMod = new Int32Array(nf);
  this.fKind = new Int32Array(nf);
  this.fKey = new Int32Array(nf);
  for (let i = 0; i < nf; i++) {
    this.fName[i] = fr[5 * i];
    this.fFile[i] = fr[5 * i + 1];
    this.fLine[i] = fr[5 * i + 2];
    this.fMod[i] = fr[5 * i + 3];
    this.fKind[i] = fr[5 * i + 4];
    this.fKey[i] = WP.keyOf(this.strings[this.fName[i]] + "\u0000" + this.strings[this.fMod[i]]);
  }
  this.sysKey = this.syscalls.map(s => WP.keyOf("\u0001" + s));
  const nodes = WP.unpack(d.nodes || "");
  const nn = nodes.length / 2 + 1;
  this.nParent = new Int32Array(nn);
  this.nFrame = new Int32Array(nn);
  this.nParent[0] = -1;
  this.nFrame[0] = -1;
  for (let i = 1; i < nn; i++) {
    this.nParent[i] = i - nodes[2 * (i - 1)];
    this.nFrame[i] = nodes[2 * (i - 1) + 1];
    if (this.nParent[i] < 0 || this.nParent[i] >= i || this.nFrame[i] >= nf)
      throw new Error("bad node " + i);
  }
  this.threads = (d.threads || []).map((t, i) => ({ index: i, tid: t[0], name: t[1], samples: t[2] }));
  /* Runs, flat over all threads. */
  let total = 0;
  const rs = (d.runs || []).map(s => WP.unpack(s));
  for (const r of rs) total += r.length / 4;
  this.nrRuns = total;
  this.rThread = new Int32Array(total);
  this.rNode = new Int32Array(total);
  this.rState = new Int32Array(total);
  this.rFirst = new Float64Array(total);
  this.rCount = new Float64Array(total);
  let k = 0;
  rs.forEach((r, t) => {
    let end = 0;
    for (let i = 0; i < r.length; i += 4, k++) {
      this.rThread[k] = t;
      this.rNode[k] = r[i];
      this.rState[k] = r[i + 1];
      this.rFirst[k] = end + r[i + 2];
      this.rCount[k] = r[i + 3];
      end = this.rFirst[k] + this.rCount[k];
    }
  });
  this.nrSamples = 0;
  for (let i = 0; i < total; i++) this.nrSamples += this.rCount[i];
  this.trees = {};
};

/* The label of function key `k`. */
WP.keyLabel = function (k) {
  const s = WP.keyNames[k];
  if (s.charCodeAt(0) === 1) return "[" + s.slice(1) + "]";
  const z = s.indexOf("\u0000");
  return z < 0 ? s : s.slice(0, z);
};
WP.isSysKey = k => WP.keyNames[k].charCodeAt(0) === 1;

/* A call tree of one profile: the forward one (root first, an off-CPU
 * sample's system call as a leaf below its stack) or the inverted one
 * (that leaf first, then the callers). Node 0 is the root; a parent's id
 * is below its children's. term[r] is the node run r ends at. */
WP.Tree = function (p, inverted) {
  this.p = p;
  this.inverted = inverted;
  this.parent = [-1];
  this.key = [-1];
  this.depth = [0];
  this.frame = [-1]; /* a frame of the profile it came from (for file:line) */
  this.child = new Map();
  this.term = new Int32Array(p.nrRuns);
  const M = 1 << 22;
  const get = (parent, key, frame) => {
    const id = parent * M + key;
    let c = this.child.get(id);
    if (c === undefined) {
      c = this.parent.length;
      this.parent.push(parent);
      this.key.push(key);
      this.depth.push(this.depth[parent] + 1);
      this.frame.push(frame);
      this.child.set(id, c);
    }
    return c;
  };
  this.get = get;
  this.M = M;
  const sysLeaf = st => (st >= 2 ? p.sysKey[st - 2] : -1);
  if (!inverted) {
    const of = new Int32Array(p.nParent.length);
    for (let i = 1; i < of.length; i++) {
      const f = p.nFrame[i];
      of[i] = get(of[p.nParent[i]], p.fKey[f], f);
    }
    for (let r = 0; r < p.nrRuns; r++) {
      const sk = sysLeaf(p.rState[r]);
      this.term[r] = sk < 0 ? of[p.rNode[r]] : get(of[p.rNode[r]], sk, -1);
    }
  } else {
    const memo = new Map();
    for (let r = 0; r < p.nrRuns; r++) {
      const sk = sysLeaf(p.rState[r]);
      const id = p.rNode[r] * 2048 + (sk < 0 ? 0 : p.rState[r] - 1);
      let t = memo.get(id);
      if (t === undefined) {
        t = sk < 0 ? 0 : get(0, sk, -1);
        for (let n = p.rNode[r]; n > 0; n = p.nParent[n]) t = get(t, p.fKey[p.nFrame[n]], p.nFrame[n]);
        memo.set(id, t);
      }
      this.term[r] = t;
    }
  }
  this.size = this.parent.length;
  this.maxDepth = 0;
  for (let i = 0; i < this.size; i++) if (this.depth[i] > this.maxDepth) this.maxDepth = this.depth[i];
  /* Children lists, sorted by label. */
  this.kids = Array.from({ length: this.size }, () => []);
  for (let i = 1; i < this.size; i++) this.kids[this.parent[i]].push(i);
  for (const k of this.kids)
    if (k.length > 1) k.sort((a, b) => (WP.keyLabel(this.key[a]) < WP.keyLabel(this.key[b]) ? -1 : 1));
};

WP.tree = function (p, inverted) {
  const name = inverted ? "inv" : "fwd";
  if (!p.trees[name]) p.trees[name] = new WP.Tree(p, inverted);
  return p.trees[name];
};

/* A selection: which threads (null: all), which states, which ticks. */
WP.Selection = function () {
  this.threads = null; /* a Set of thread indices, or null for all */
  this.on = true;
  this.off = true;
  this.from = 0;
  this.to = Infinity;
};

/* Samples of run r inside the selection. */
WP.runWeight = function (p, sel, r) {
  if (sel.threads && !sel.threads.has(p.rThread[r])) return 0;
  const on = p.rState[r] === 0;
  if (on ? !sel.on : !sel.off) return 0;
  const a = Math.max(p.rFirst[r], sel.from), b = Math.min(p.rFirst[r] + p.rCount[r], sel.to);
  return b > a ? b - a : 0;
};

/* Sums over tree t for the selection: total[n] and on[n] samples at or
 * below node n. */
WP.sum = function (t, sel) {
  const p = t.p, total = new Float64Array(t.size), on = new Float64Array(t.size);
  for (let r = 0; r < p.nrRuns; r++) {
    const w = WP.runWeight(p, sel, r);
    if (!w) continue;
    total[t.term[r]] += w;
    if (p.rState[r] === 0) on[t.term[r]] += w;
  }
  for (let i = t.size - 1; i > 0; i--) {
    total[t.parent[i]] += total[i];
    on[t.parent[i]] += on[i];
  }
  return { total, on };
};

/* The nodes of tree `t` that base tree `b` has too (same path of
 * functions): baseOf[n] = b's node, or -1. */
WP.overlay = function (t, b) {
  const map = new Int32Array(b.size).fill(-1);
  const out = new Int32Array(t.size).fill(-1);
  map[0] = 0;
  out[0] = 0;
  for (let i = 1; i < b.size; i++) {
    const pm = map[b.parent[i]];
    if (pm < 0) continue;
    const c = t.child.get(pm * t.M + b.key[i]);
    if (c !== undefined) {
      map[i] = c;
      out[c] = i;
    }
  }
  return out;
};

/* Samples per time slice for the selection's threads (not its time range):
 * on[i] and off[i] for slices of `per` ticks each. */
WP.timeline = function (p, sel, slices) {
  const n = Math.max(1, Math.min(slices, p.ticks || 1));
  const per = Math.max(1, (p.ticks || 1) / n);
  const on = new Float64Array(n), off = new Float64Array(n);
  for (let r = 0; r < p.nrRuns; r++) {
    if (sel.threads && !sel.threads.has(p.rThread[r])) continue;
    const dst = p.rState[r] === 0 ? on : off;
    let a = p.rFirst[r];
    const end = a + p.rCount[r];
    while (a < end) {
      const s = Math.min(n - 1, Math.floor(a / per));
      const b = Math.min(end, (s + 1) * per);
      dst[s] += b - a;
      a = b > a ? b : end;
    }
  }
  return { on, off, per, n };
};

/* Off-CPU samples in the selection by system call: [[name, samples]...],
 * largest first; "(none seen)" for samples off CPU in no known call. */
WP.bySyscall = function (p, sel) {
  const c = new Float64Array(p.syscalls.length + 2);
  for (let r = 0; r < p.nrRuns; r++) if (p.rState[r] > 0) c[p.rState[r]] += WP.runWeight(p, sel, r);
  const out = [];
  for (let i = 1; i < c.length; i++)
    if (c[i] > 0) out.push([i === 1 ? "(not in a system call)" : p.syscalls[i - 2], c[i]]);
  out.sort((a, b) => b[1] - a[1]);
  return out;
};
