// allocmux's HTML report: wires the views of one page to the data blob the
// CLI wrote into it (`<script id="allocmux-data">`, see
// flamegraph/src/html/mod.rs). d3 and d3-flame-graph are inlined before
// this script; nothing is fetched.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("allocmux-data").textContent);
  
  // ---- formatting, as the text report words figures -------------------
  const fmtCount = (v) => Math.round(v).toLocaleString("en-US");
  function fmtBytes(v) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (i + 1 < units.length && v >= Math.pow(1024, i + 1)) i++;
    return i === 0 ? fmtCount(v) + " B" : (v / Math.pow(1024, i)).toFixed(1) + " " + units[i];
  }
  function fmtNs(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(2) + " s";
    if (v >= 1e6) return (v / 1e6).toFixed(2) + " ms";
    if (v >= 1e3) return (v / 1e3).toFixed(2) + " µs";
    return fmtCount(v) + " ns";
  }
  const pct = (x) => (100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 1) + "%";
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function table(headers, rows, cls) {
    const t = el("table", { class: cls || "figures" });
    t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))));
    const b = el("tbody");
    for (const r of rows) b.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
    t.append(b);
    return t;
  }

  // ---- lifetimes: blocks freed per decade of lifetime -------------------
  const DECADES = ["<1µs", "<10µs", "<100µs", "<1ms", "<10ms", "<100ms", "<1s", "<10s", "≥10s"];
  // The first four decades are "short-lived": freed within 1 ms.
  const SHORT_LIVED = 4;
  const sumOf = (a) => a.reduce((x, y) => x + y, 0);
  // A histogram table: one row per decade (and blocks never freed), with
  // its count, share and a bar.
  function lifetimeHistogram(freed, neverFreed, id) {
    const all = sumOf(freed) + neverFreed || 1;
    const row = (label, n) => [label, fmtCount(n), pct(n / all), el("div", { class: "bar", style: "width:" + (200 * n / all).toFixed(1) + "px" })];
    const rows = freed.map((n, i) => row(DECADES[i], n));
    rows.push(row("never freed", neverFreed));
    return table(["lifetime", "blocks", "share", ""], rows, "figures lifetimes " + id);
  }

  // ---- tabs ------------------------------------------------------------
  const views = [];
  function addView(id, label, build) {
    views.push({ id, label, build, built: false });
  }
  function show(id) {
    for (const v of views) {
      const on = v.id === id;
      document.getElementById("view-" + v.id).hidden = !on;
      document.getElementById("tab-" + v.id).classList.toggle("active", on);
      if (on && !v.built) {
        v.built = true;
        v.build(document.getElementById("view-" + v.id));
      }
    }
    document.body.dataset.view = id;
  }

  document.getElementById("title").textContent = data.title;
  document.title = data.title + " — allocmux";
  // How the figures were taken (sampled, pruned) is said above every view.
  if (data.notes.length) {
    document.querySelector("header").append(el("ul", { class: "notes" }, ...data.notes.map((n) => el("li", {}, n))));
  }

  // ---- summary ---------------------------------------------------------
  function buildSummary(root) {
    const r = data.report;
    const est = (p) => (p.recording === "sampled" ? "≈" : "");
    const share = (s) => (s == null ? "-" : pct(s));
    const time = (ns) => (ns == null ? "-" : fmtNs(ns));
    const known = (p, s) => (p.figures_known === false ? "?" : s);
    // A process that ended before its first periodic write left zeros
    // that are not figures: unknown, and so is any total over it.
    const unknown = r.processes.filter((p) => p.figures_known === false);
    const totalKnown = (s) => (unknown.length ? "?" : s);
    const program = (p) => (p.argv.length ? p.argv[0].split("/").pop() : p.exe.split("/").pop());
    const rows = r.processes.map((p) => [
      String(p.pid),
      program(p) + (p.figures_known === false ? "?" : ""),
      p.allocator,
      known(p, est(p) + fmtCount(p.allocation_calls)),
      known(p, est(p) + fmtCount(p.calls.free || 0)),
      known(p, est(p) + fmtBytes(p.bytes_allocated)),
      known(p, est(p) + fmtBytes(p.peak_live_bytes)),
      known(p, est(p) + fmtBytes(p.live_bytes_at_exit)),
      known(p, time(p.allocator_ns)),
      known(p, share(p.allocator_time_share)),
      // Read when the process started: not its maximum.
      known(p, fmtBytes(p.max_rss_bytes)),
    ]);
    const t = r.total;
    const anyEst = r.processes.some((p) => p.recording === "sampled") ? "≈" : "";
    const untimed = r.processes.every((p) => p.allocator_ns == null);
    rows.push([
      "total",
      r.processes.length + " process" + (r.processes.length === 1 ? "" : "es"),
      t.allocator,
      totalKnown(anyEst + fmtCount(t.allocation_calls)),
      totalKnown(anyEst + fmtCount(t.calls.free || 0)),
      totalKnown(anyEst + fmtBytes(t.bytes_allocated)),
      totalKnown(anyEst + fmtBytes(t.peak_live_bytes)),
      totalKnown(anyEst + fmtBytes(t.live_bytes_at_exit)),
      // No process timed its calls at the sampled level: nothing to sum.
      untimed ? "-" : totalKnown(fmtNs(t.allocator_ns)),
      untimed ? "-" : totalKnown(pct(t.allocator_time_share)),
      // A run's is the kernel's, of the whole tree: known whatever the
      // processes wrote; from saved profiles it is the largest process's.
      r.command ? fmtBytes(t.max_rss_bytes) : totalKnown(fmtBytes(t.max_rss_bytes)),
    ]);
    root.append(el("h2", {}, "Processes"));
    root.append(
      table(
        ["pid", "program", "allocator", "allocations", "frees", "allocated", "peak live", "at exit", "allocator time", "share of CPU", "max RSS"],
        rows,
        "figures summary"
      )
    );
    if (t.temporary_allocations != null) {
      root.append(el("p", { class: "hint", id: "temporaries" }, "temporary: " + fmtCount(t.temporary_allocations) + " of " + fmtCount(t.allocation_calls) + " allocations (" + pct(t.temporary_allocations / Math.max(1, t.allocation_calls)) + ") freed before their thread allocated again"));
    }
    if (t.lifetimes && t.lifetimes.freed + t.lifetimes.never_freed > 0) {
      const l = t.lifetimes;
      root.append(el("h2", {}, "Lifetimes"));
      // Sampled stacks' lifetimes are estimates, as their counts are.
      const ltEst = data.flame && data.flame.weights[0].estimated ? "≈" : "";
      root.append(el("p", { class: "hint", id: "lifetimes-line" }, ltEst + fmtCount(l.freed) + " blocks freed, " + pct(l.short_lived / Math.max(1, l.freed)) + " within 1 ms" + (l.mean_ns == null ? "" : ", mean " + fmtNs(l.mean_ns)) + "; " + fmtCount(l.never_freed) + " never freed"));
      root.append(lifetimeHistogram(l.decades.map((d) => d.freed), l.never_freed, "lifetimes-all"));
    }
    if (unknown.length) {
      root.append(el("p", { class: "hint", id: "unknown-figures" }, "?: " + unknown.map((p) => "pid " + p.pid + " " + program(p)).join(", ") + " ended before its first periodic write (killed early, or its output cut off): what it allocated is unknown, not zero"));
    }
    const intervals = r.processes.filter((p) => p.estimate_intervals);
    if (intervals.length) {
      root.append(
        el("ul", { class: "hint" }, ...intervals.map((p) => {
          const e = p.estimate_intervals;
          return el("li", {}, "pid " + p.pid + ": 95% intervals of the estimates: allocations " + fmtCount(e.allocations[0]) + "–" + fmtCount(e.allocations[1]) + ", bytes " + fmtBytes(e.bytes[0]) + "–" + fmtBytes(e.bytes[1]));
        }))
      );
    }
    const fns = Object.keys(t.calls).filter((f) => t.calls[f] > 0 || r.processes.some((p) => p.calls[f] > 0));
    root.append(el("h2", {}, "Calls per function"));
    if (!fns.length) {
      root.append(el("p", { class: "hint", id: "no-calls" }, unknown.length ? "Unknown: no process wrote its figures." : "No calls."));
    } else {
      root.append(
        table(
          ["function", ...r.processes.map((p) => "pid " + p.pid + " " + program(p)), "total"],
          fns.map((f) => [f, ...r.processes.map((p) => known(p, est(p) + fmtCount(p.calls[f] || 0))), totalKnown(anyEst + fmtCount(t.calls[f]))]),
          "figures calls"
        )
      );
    }
    const stats = r.processes.filter((p) => p.allocator_stats);
    if (stats.length) {
      root.append(el("h2", {}, "What the allocator holds"));
      root.append(
        table(
          ["pid", "allocator", "figures", "heap overhead"],
          stats.map((p) => {
            const s = p.allocator_stats;
            const figs = Object.entries(s.figures)
              .map(([k, v]) => k + " " + (k.includes("faults") ? fmtCount(v) : fmtBytes(v)))
              .join(", ");
            // The report's ratio: from the reading nearest the peak, none
            // where that is under half the peak (see `heap_overhead` in json.rs).
            return [String(p.pid), s.backend, figs, p.heap_overhead == null ? "not measured" : p.heap_overhead.toFixed(2) + "×"];
          }),
          "figures stats"
        )
      );
    }
    if (r.unprofiled.length) {
      root.append(el("h2", {}, "Not profiled"));
      root.append(el("ul", {}, ...r.unprofiled.map((u) => el("li", {}, "pid " + u.pid + " ran " + u.program + ": " + u.reason))));
    }
  }

  // ---- the call tree ---------------------------------------------------
  // Nodes as d3-flame-graph reads them: `n` the name, `s` the self values
  // (one per weight), `c` the children.
  function topDown(f) {
    const nodes = f.tree.name.map((i) => ({ n: f.tree.names[i], s: f.weights.map(() => 0), c: [] }));
    for (const s of f.tree.selfs) nodes[s[0]].s = s.slice(1);
    // `lt`: blocks freed per decade of lifetime, the lifetimes' sum in
    // ticks, blocks never freed (of the node's own stacks).
    for (const l of f.tree.lifetimes) nodes[l[0]].lt = l.slice(1);
    for (let i = 1; i < nodes.length; i++) nodes[f.tree.parent[i]].c.push(nodes[i]);
    return nodes;
  }
  // The bottom-up tree: each node's self values along its path read from
  // the node up to the root, so the roots are the allocating functions.
  function bottomUp(f) {
    const root = { n: "all", s: f.weights.map(() => 0), c: [], m: new Map() };
    const { name, parent, names } = f.tree;
    for (const s of f.tree.selfs) {
      let at = root;
      for (let n = s[0]; n > 0; n = parent[n]) {
        let next = at.m.get(name[n]);
        if (!next) {
          next = { n: names[name[n]], s: f.weights.map(() => 0), c: [], m: new Map() };
          at.m.set(name[n], next);
          at.c.push(next);
        }
        at = next;
      }
      for (let w = 0; w < f.weights.length; w++) at.s[w] += s[w + 1];
    }
    return root;
  }
  function totalsOf(node, w) {
    let t = node.s[w];
    for (const c of node.c) t += totalsOf(c, w);
    node.t = t;
    return t;
  }

  // The weight is one for the page: a view that shows it registers how to
  // redraw, and a view built later starts from it.
  let weight = data.flame ? data.flame.initial : 1;
  const onWeight = [];
  function setWeight(w) {
    weight = w;
    for (const f of onWeight) f();
  }
  const fmtWeight = (w, v) => {
    const wj = data.flame.weights[w];
    const shown = w === 0 ? fmtCount(v) : w === 2 ? (wj.unit === "ns" ? fmtNs(v) : fmtCount(v) + " ticks") : fmtBytes(v);
    return (wj.estimated ? "≈" : "") + shown;
  };

  // A weight the profiles do not measure (temporary allocations without
  // exact stacks) is listed, but cannot be chosen.
  const weightOption = (w, i) =>
    w.measured
      ? el("option", { value: String(i) }, w.name + ": " + w.describe)
      : el("option", { value: String(i), disabled: "" }, w.name + ": not measured (record exact stacks)");

  // ---- flamegraph ------------------------------------------------------
  function buildFlame(root) {
    const f = data.flame;
    const down = topDown(f);
    let up = null;
    const head = el("div", { class: "controls" });
    const select = el("select", { id: "weight" }, ...f.weights.map(weightOption));
    select.value = String(weight);
    const inverted = el("input", { type: "checkbox", id: "inverted" });
    const search = el("input", { type: "search", id: "search", placeholder: "search (regular expression)" });
    const reset = el("button", { id: "reset-zoom" }, "reset zoom");
    head.append(el("label", {}, "weight ", select), el("label", {}, inverted, " inverted (bottom-up: the allocating functions first, their callers under them)"), search, reset);
    root.append(head);
    const total = el("p", { id: "flame-total" });
    root.append(total);
    const details = el("p", { id: "flame-details", class: "details" }, "hover over a frame for its figures; click to zoom");
    root.append(details);
    const chartDiv = el("div", { id: "flame" });
    root.append(chartDiv);
    const frameBox = el("div", { id: "frame-figures" });
    root.append(frameBox);

    const width = Math.max(600, root.clientWidth || document.body.clientWidth - 40);
    const tip = function () {};
    tip.show = function (event, d) {
      details.textContent = d.data.n + " — " + fmtWeight(weight, d.value) + " (" + pct(d.value / rootValue()) + " of the total), self " + fmtWeight(weight, d.data.s[weight]);
    };
    tip.hide = function () {};
    // The UMD build's global is the module; its default export makes a chart.
    const chart = flamegraph
      .default()
      .width(width)
      // Root on top (an icicle, as pprof and heaptrack draw it): the
      // widest frames are in view without scrolling past deep stacks.
      .inverted(true)
      .cellHeight(18)
      // The first view is drawn at once; later changes animate.
      .transitionDuration(0)
      .minFrameSize(1)
      .selfValue(true)
      .sort(true)
      // Called with our nodes while laying out, and with d3's hierarchy
      // nodes (whose value is the total) while searching.
      .getValue((d) => (d.s ? d.s[weight] : d.value))
      .tooltip(tip)
      .setSearchHandler((results, sum, totalValue) => {
        details.textContent = search.value ? results.length + " frames match “" + search.value + "”: " + fmtWeight(weight, sum) + " (" + pct(totalValue ? sum / totalValue : 0) + ")" : "";
      })
      .onClick((d) => showFrame(d));
    let current = down[0];
    const rootValue = () => totalsOf(current, weight) || 1;
    function sayTotal() {
      const w = f.weights[weight];
      total.textContent = w.describe + ": total " + w.total_shown + (inverted.checked ? " — bottom-up" : "");
    }
    function showFrame(d) {
      frameBox.replaceChildren();
      const rows = f.weights.map((w, i) => {
        let t = 0;
        (function sum(n) {
          t += n.s[i];
          n.c.forEach(sum);
        })(d.data);
        return [w.name, fmtWeight(i, t), fmtWeight(i, d.data.s[i])];
      });
      frameBox.append(el("h3", {}, d.data.n), table(["weight", "total", "self"], rows, "figures frame"));
    }
    d3.select(chartDiv).datum(current).call(chart);
    chart.transitionDuration(250);
    sayTotal();
    // A search is a regular expression; one that does not parse yet (the
    // user is still typing) marks nothing and says so.
    function find() {
      if (!search.value) return chart.clear();
      try {
        new RegExp(search.value);
      } catch (e) {
        chart.clear();
        details.textContent = "not a regular expression (yet): " + search.value;
        return;
      }
      chart.search(search.value);
    }
    onWeight.push(() => {
      select.value = String(weight);
      chart.update();
      sayTotal();
      find();
    });
    select.addEventListener("change", () => setWeight(Number(select.value)));
    inverted.addEventListener("change", () => {
      if (inverted.checked && !up) up = bottomUp(f);
      current = inverted.checked ? up : down[0];
      chart.update(current);
      sayTotal();
      find();
    });
    search.addEventListener("input", find);
    reset.addEventListener("click", () => chart.resetZoom());
  }

  // ---- functions: self and total per function, callers and callees ------
  function buildFunctions(root) {
    const f = data.flame;
    const nodes = topDown(f);
    const parent = f.tree.parent;
    const head = el("div", { class: "controls" });
    const select = el("select", { id: "fn-weight" }, ...f.weights.map(weightOption));
    head.append(el("label", {}, "weight ", select));
    root.append(head, el("p", { class: "hint" }, "Click a column to sort, a function to see its callers and callees. Total counts a recursive function once per stack." + (f.lifetimes_measured ? " Short-lived: the share of the blocks allocated under the function that were freed within 1 ms." : "")));
    const split = el("div", { class: "split" });
    const left = el("div", { class: "fn-table" });
    const right = el("div", { id: "fn-peek", class: "peek" }, "Click a function.");
    split.append(left, right);
    root.append(split);
    let sortKey = "total";
    let sortDesc = true;
    let stats = null;
    let totalAll = 1;
    // Lifetimes, where recorded: each node's subtree total (`ltT`), each
    // function's over the stacks through it (counted once per stack).
    const lifetimes = f.lifetimes_measured;
    const LT = 11;
    if (lifetimes) {
      for (let i = nodes.length - 1; i >= 0; i--) {
        const t = (nodes[i].lt || new Array(LT).fill(0)).slice();
        for (const c of nodes[i].c) for (let k = 0; k < LT; k++) t[k] += c.ltT[k];
        nodes[i].ltT = t;
      }
    }
    // Sampled stacks' lifetimes are estimates, as their counts are.
    const ltEst = f.weights[0].estimated ? "≈" : "";
    const meanNs = (lt) => {
      const n = sumOf(lt.slice(0, 9));
      return n && f.ticks_per_ns ? lt[9] / f.ticks_per_ns / n : null;
    };
    function compute() {
      const w = weight;
      for (let i = nodes.length - 1; i >= 0; i--) {
        let t = nodes[i].s[w];
        for (const c of nodes[i].c) t += c.t;
        nodes[i].t = t;
      }
      totalAll = nodes[0].t || 1;
      const byName = new Map();
      const get = (n) => {
        let s = byName.get(n);
        if (!s) byName.set(n, (s = { name: n, self: 0, total: 0, callers: new Map(), callees: new Map(), lt: new Array(LT).fill(0) }));
        return s;
      };
      // Depth first with the names on the path, so that a recursive
      // function's total counts each stack once.
      const onPath = new Map();
      (function walk(i) {
        const node = nodes[i];
        if (i > 0 && lifetimes && !onPath.get(node.n) && node.ltT.some((v) => v > 0)) {
          const s = get(node.n);
          for (let k = 0; k < LT; k++) s.lt[k] += node.ltT[k];
        }
        if (i > 0 && node.t > 0) {
          const s = get(node.n);
          s.self += node.s[w];
          if (!onPath.get(node.n)) s.total += node.t;
          if (parent[i] > 0) {
            const p = nodes[parent[i]].n;
            s.callers.set(p, (s.callers.get(p) || 0) + node.t);
            const ps = get(p);
            ps.callees.set(node.n, (ps.callees.get(node.n) || 0) + node.t);
          }
        }
        onPath.set(node.n, (onPath.get(node.n) || 0) + 1);
        for (const c of node.c) walk(c.i);
        onPath.set(node.n, onPath.get(node.n) - 1);
      })(0);
      // A function with lifetimes but none of this weight is listed too,
      // so that sorting by lifetime sees every one.
      stats = [...byName.values()];
      for (const s of stats) {
        const freed = sumOf(s.lt.slice(0, 9));
        s.shortLived = freed ? sumOf(s.lt.slice(0, SHORT_LIVED)) / freed : -1;
        const m = meanNs(s.lt);
        s.meanLifetime = m == null ? -1 : m;
      }
    }
    nodes.forEach((n, i) => (n.i = i));
    const LIMIT = 1000;
    function render() {
      stats.sort((a, b) => {
        // A function none of whose blocks was freed has no lifetime
        // figure (-1): last, whichever way the column is sorted.
        if ((a[sortKey] < 0) !== (b[sortKey] < 0)) return a[sortKey] < 0 ? 1 : -1;
        const d = sortKey === "name" ? a.name.localeCompare(b.name) : a[sortKey] - b[sortKey];
        return sortDesc ? -d : d;
      });
      const head = [
        ["name", "function"],
        ["self", "self"],
        ["self", "self %"],
        ["total", "total"],
        ["total", "total %"],
      ];
      if (lifetimes) head.push(["shortLived", "short-lived"], ["meanLifetime", "mean lifetime"]);
      const t = el("table", { id: "functions", class: "figures sortable" });
      t.append(
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ...head.map(([k, label]) =>
              el("th", { "data-sort": k, class: k === sortKey && !label.endsWith("%") ? (sortDesc ? "desc" : "asc") : "", onclick: () => {
                if (sortKey === k) sortDesc = !sortDesc;
                else { sortKey = k; sortDesc = k !== "name"; }
                render();
              } }, label)
            )
          )
        )
      );
      const body = el("tbody");
      for (const s of stats.slice(0, LIMIT)) {
        body.append(
          el(
            "tr",
            { class: "fn-row", "data-name": s.name, onclick: () => peek(s) },
            el("td", { class: "name" }, s.name),
            el("td", {}, fmtWeight(weight, s.self)),
            el("td", {}, pct(s.self / totalAll)),
            el("td", {}, fmtWeight(weight, s.total)),
            el("td", {}, pct(s.total / totalAll)),
            lifetimes ? el("td", { class: "short-lived" }, s.shortLived < 0 ? "-" : ltEst + pct(s.shortLived)) : null,
            lifetimes ? el("td", {}, s.meanLifetime < 0 ? "-" : ltEst + fmtNs(s.meanLifetime)) : null
          )
        );
      }
      t.append(body);
      left.replaceChildren(t);
      if (stats.length > LIMIT) left.append(el("p", { class: "hint" }, "the first " + fmtCount(LIMIT) + " of " + fmtCount(stats.length) + " functions"));
    }
    function peek(s) {
      const part = (title, id, m) => {
        const rows = [...m.entries()].sort((a, b) => b[1] - a[1]);
        const sum = rows.reduce((a, r) => a + r[1], 0) || 1;
        return [
          el("h3", {}, title),
          rows.length
            ? table(["function", "value", "share"], rows.map(([n, v]) => [n, fmtWeight(weight, v), pct(v / sum)]), "figures " + id)
            : el("p", { class: "hint" }, "none"),
        ];
      };
      right.replaceChildren(
        el("h2", {}, s.name),
        el("p", {}, "self " + fmtWeight(weight, s.self) + ", total " + fmtWeight(weight, s.total) + " (" + pct(s.total / totalAll) + ")"),
        ...(lifetimes && s.lt.some((v) => v > 0)
          ? [el("h3", {}, "Lifetimes of the blocks allocated under it"), lifetimeHistogram(s.lt.slice(0, 9), s.lt[10], "fn-lifetimes")]
          : []),
        ...part("Callers (who calls it)", "callers", s.callers),
        ...part("Callees (whom it calls)", "callees", s.callees)
      );
    }
    select.value = String(weight);
    onWeight.push(() => {
      select.value = String(weight);
      compute();
      render();
      right.replaceChildren("Click a function.");
    });
    select.addEventListener("change", () => setWeight(Number(select.value)));
    compute();
    render();
  }

  // ---- memory over time ------------------------------------------------
  function buildTimeline(root) {
    const tl = data.timelines;
    if (!tl.length) {
      root.append(el("p", { class: "hint" }, "The profiles have no memory timeline."));
    } else {
      root.append(el("h2", {}, "Live heap (solid) and resident memory (dashed)"));
      const W = Math.max(600, (root.clientWidth || 1000) - 20), H = 380, m = { l: 80, r: 20, t: 20, b: 40 };
      const tmax = d3.max(tl, (p) => d3.max(p.points, (q) => q[0])) || 1;
      const ymax = d3.max(tl, (p) => d3.max(p.points, (q) => Math.max(q[1], q[2]))) || 1;
      const x = d3.scaleLinear().domain([0, tmax / 1e9]).range([m.l, W - m.r]);
      const y = d3.scaleLinear().domain([0, ymax * 1.1]).range([H - m.b, m.t]);
      const svg = d3.select(root).append("svg").attr("id", "timeline").attr("width", W).attr("height", H);
      svg.append("g").attr("transform", "translate(0," + (H - m.b) + ")").call(d3.axisBottom(x).ticks(8).tickFormat((s) => s + " s"));
      svg.append("g").attr("transform", "translate(" + m.l + ",0)").call(d3.axisLeft(y).ticks(6).tickFormat(fmtBytes));
      const colour = d3.scaleOrdinal(d3.schemeTableau10);
      const legend = el("ul", { class: "legend" });
      tl.forEach((p, i) => {
        const line = (k) => d3.line().x((q) => x(q[0] / 1e9)).y((q) => y(q[k]));
        svg.append("path").attr("class", "live").attr("fill", "none").attr("stroke", colour(i)).attr("stroke-width", 2).attr("d", line(1)(p.points));
        svg.append("path").attr("class", "rss").attr("fill", "none").attr("stroke", colour(i)).attr("stroke-dasharray", "7,4").attr("d", line(2)(p.points));
        const peak = p.points.reduce((a, q) => (q[1] > a[1] ? q : a), p.points[0]);
        const g = svg.append("g").attr("class", "peak-marker").attr("data-bytes", String(peak[1]));
        g.append("circle").attr("cx", x(peak[0] / 1e9)).attr("cy", y(peak[1])).attr("r", 5).attr("fill", colour(i)).attr("stroke", "#000");
        // Right of the marker, or left of it in the right half, so the
        // label stays inside the chart.
        const right = x(peak[0] / 1e9) > (m.l + W - m.r) / 2;
        g.append("text").attr("x", x(peak[0] / 1e9) + (right ? -8 : 8)).attr("y", y(peak[1]) - 8).attr("font-size", 12)
          .attr("text-anchor", right ? "end" : "start")
          .text("peak " + fmtBytes(peak[1]) + " at " + (peak[0] / 1e9).toFixed(2) + " s");
        legend.append(el("li", { style: "color:" + colour(i) }, p.label + ": peak live " + fmtBytes(peak[1]) + ", peak resident " + fmtBytes(d3.max(p.points, (q) => q[2]))));
      });
      root.append(legend);
      buildTemporaryTimeline(root, tl.filter((p) => p.temporary_counted), x, W, m, colour);
    }
    const hist = data.report.total.size_histogram || [];
    const filled = hist.filter((b) => b.count > 0);
    root.append(el("h2", {}, "Allocation sizes"));
    if (!filled.length) {
      root.append(el("p", { class: "hint" }, "The profiles have no size histogram (the sampled recording level does not count sizes)."));
      return;
    }
    const max = d3.max(filled, (b) => b.count);
    // The recorder counts small requests at its timed calls, a sample
    // weighted by its mean (docs/recording.md): those counts are estimates.
    root.append(el("p", { class: "hint" }, "≈: requests under 64 KiB are counted at the timed calls, a sample, so their counts are estimates; larger ones are all counted."));
    const t = table(["requested size", "allocations", ""], filled.map((b) => [
      b.min_bytes === b.max_bytes ? fmtBytes(b.min_bytes) : fmtBytes(b.min_bytes) + " – " + fmtBytes(b.max_bytes),
      (b.estimated ? "≈" : "") + fmtCount(b.count),
      el("div", { class: "bar", style: "width:" + Math.max(1, (300 * b.count) / max) + "px" }),
    ]), "figures histogram");
    t.id = "size-histogram";
    root.append(t);
  }

  // Temporary allocations over time (exact stacks): each process's count
  // so far, on the memory chart's time axis, as heaptrack draws them.
  function buildTemporaryTimeline(root, tl, x, W, m, colour) {
    if (!tl.length) return;
    root.append(el("h2", {}, "Temporary allocations over time (so far)"));
    const H = 220;
    const ymax = d3.max(tl, (p) => d3.max(p.points, (q) => q[3])) || 1;
    const y = d3.scaleLinear().domain([0, ymax * 1.1]).range([H - m.b, m.t]);
    const svg = d3.select(root).append("svg").attr("id", "temporary-timeline").attr("width", W).attr("height", H);
    svg.append("g").attr("transform", "translate(0," + (H - m.b) + ")").call(d3.axisBottom(x).ticks(8).tickFormat((s) => s + " s"));
    svg.append("g").attr("transform", "translate(" + m.l + ",0)").call(d3.axisLeft(y).ticks(4).tickFormat(fmtCount));
    // Straight between samples: each point is the count so far, and when
    // between two samples the count grew is not known.
    const line = d3.line().x((q) => x(q[0] / 1e9)).y((q) => y(q[3]));
    tl.forEach((p) => {
      const last = p.points[p.points.length - 1];
      svg.append("path").attr("class", "temporary").attr("data-last", String(last[3])).attr("fill", "none")
        .attr("stroke", colour(data.timelines.indexOf(p))).attr("stroke-width", 2).attr("d", line(p.points));
    });
  }

  // ---- compare and diff ------------------------------------------------
  function buildCompare(root) {
    const c = data.compare;
    root.append(el("h2", { id: "verdict" }, "Verdict: " + c.verdict));
    // Side by side: medians with their interquartile ranges, and the
    // ratios to the baseline with their intervals.
    const j = c.summary;
    const spread = (f, fmt) => (f ? fmt(f.median) + " (" + fmt(f.q1) + "–" + fmt(f.q3) + ")" : "-");
    const ratio = (i) => (i ? i.estimate.toFixed(2) + "× (" + i.low.toFixed(2) + "–" + i.high.toFixed(2) + ")" : "-");
    const level = (100 * j.confidence_level).toFixed(0) + "%";
    const t = table(
      ["allocator", "wall (IQR)", "max RSS (IQR)", "speed-up vs " + j.baseline + " (" + level + ")", "max RSS vs " + j.baseline + " (" + level + ")", "allocations", "allocator time share"],
      j.allocators.map((a) => [
        a.allocator,
        spread(a.figures.wall_ns, fmtNs),
        spread(a.figures.max_rss_bytes, fmtBytes),
        ratio(a.speedup_vs_baseline),
        ratio(a.max_rss_vs_baseline),
        a.figures.allocation_calls ? fmtCount(a.figures.allocation_calls.median) : "-",
        a.figures.allocator_time_share ? pct(a.figures.allocator_time_share.median) : "-",
      ]),
      "figures compare"
    );
    t.id = "compare-table";
    root.append(t);
    root.append(el("p", { class: "hint" }, j.rounds + " rounds, allocators interleaved; " + j.method));
    root.append(el("h3", {}, "As compare prints it"));
    root.append(el("pre", { class: "table" }, c.table));
    // As an image: the SVG is plotters' drawing of names the programs
    // chose, so it is kept from the page's scripts and styles.
    const chart = el("div", { class: "chart" });
    chart.append(el("img", { id: "compare-chart", alt: "compare chart", src: "data:image/svg+xml;charset=utf-8," + encodeURIComponent(c.chart_svg) }));
    root.append(chart);
  }
  function buildDiff(root) {
    const d = data.diff;
    // Both profiles' totals side by side, and the change.
    const [base, next] = d.sides.map((s) => s.report);
    const anyUnknown = (r) => r.processes.some((p) => p.figures_known === false);
    const anyEst = (r) => r.processes.some((p) => p.recording === "sampled");
    const figure = (r, get, fmt) => (anyUnknown(r) ? "?" : (anyEst(r) ? "≈" : "") + fmt(get(r.total)));
    const change = (get, known) => {
      if (!known && (anyUnknown(base) || anyUnknown(next))) return "?";
      const a = get(base.total), b = get(next.total);
      if (a === b) return "=";
      return a === 0 ? "new" : (b >= a ? "+" : "−") + pct(Math.abs(b - a) / a);
    };
    const rowsOf = [
      ["processes", (t) => t.processes, fmtCount],
      ["allocations", (t) => t.allocation_calls, fmtCount],
      ["frees", (t) => t.calls.free || 0, fmtCount],
      ["allocated", (t) => t.bytes_allocated, fmtBytes],
      ["peak live", (t) => t.peak_live_bytes, fmtBytes],
      ["at exit", (t) => t.live_bytes_at_exit, fmtBytes],
      ["max RSS", (t) => t.max_rss_bytes, fmtBytes],
    ];
    const summary = table(
      ["", "base: " + d.sides[0].profile, "new: " + d.sides[1].profile, "change"],
      rowsOf.map(([name, get, fmt]) =>
        name === "processes"
          ? [name, fmtCount(base.total.processes), fmtCount(next.total.processes), change(get, true)]
          : [name, figure(base, get, fmt), figure(next, get, fmt), change(get, false)]
      ),
      "figures diff-summary"
    );
    summary.id = "diff-summary";
    root.append(el("h2", {}, "Summaries"), summary);
    root.append(el("p", {}, d.subtitle));
    // inferno's SVG runs its own search and zoom script: sandboxed, in an
    // origin of its own, it cannot reach this page.
    const frame = el("iframe", { id: "diff-frame", title: d.title, sandbox: "allow-scripts" });
    // As an SVG document (srcdoc would parse it as HTML, where it lays
    // out at a default size), once the frame has its size: inferno's
    // script fits the graph to the frame's width when it loads, and a
    // frame not laid out yet has none (its frames would get a negative
    // width). The observer first reports the frame after layout.
    // As tall as the drawing (its root on top), so the page scrolls, not a
    // frame inside it.
    const height = /<svg[^>]*\sheight="(\d+)"/.exec(d.svg);
    if (height) frame.style.height = Number(height[1]) + 4 + "px";
    root.append(frame);
    const sized = new ResizeObserver(() => {
      if (frame.clientWidth > 0) {
        sized.disconnect();
        frame.src = URL.createObjectURL(new Blob([d.svg], { type: "image/svg+xml" }));
      }
    });
    sized.observe(frame);
  }

  if (data.report) addView("summary", "Summary", buildSummary);
  if (data.flame) {
    addView("flame", "Flamegraph", buildFlame);
    addView("functions", "Functions", buildFunctions);
  }
  if (data.report) addView("timeline", "Over time", buildTimeline);
  if (data.compare) addView("compare", "Compare", buildCompare);
  if (data.diff) addView("diff", "Differential flamegraph", buildDiff);
  const nav = document.getElementById("tabs");
  const main = document.getElementById("views");
  for (const v of views) {
    nav.append(el("button", { id: "tab-" + v.id, onclick: () => show(v.id) }, v.label));
    main.append(el("section", { id: "view-" + v.id, class: "view", hidden: "" }));
  }
  const first = new URLSearchParams(location.search).get("view");
  show(views.some((v) => v.id === first) ? first : data.flame ? "flame" : views[0].id);
})();
