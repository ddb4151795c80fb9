// Drives headless Chromium (Debian's, through playwright-core) over an
// allocmux HTML report loaded from disk, and prints what it saw as one JSON
// object on stdout: the requests that left the file (blocked and counted),
// console and page errors, and per view the DOM facts the Rust test
// (flamegraph/tests/html_report.rs) asserts on; screenshots of each view go
// to SHOTS. The benchmark (scripts/html_report.py) uses the `render` mode.
//
//   node check_report.cjs profile|summary|compare|diff|render REPORT.html SHOTS [SEARCH] [RUNS]
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

const [mode, report, shots, search = "", runs = "1"] = process.argv.slice(2);
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

async function withPage(fn) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "allocmux-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 900 },
  });
  // Waits for the page give up after minutes: a loaded machine can starve
  // Chromium for seconds.
  context.setDefaultTimeout(120000);
  const out = { blocked: [], console_errors: [], page_errors: [] };
  try {
    const page = await context.newPage();
    await context.route("**/*", (route) => {
      const url = route.request().url();
      if (/^(file|data|about|blob):/.test(url)) return route.continue();
      out.blocked.push(url);
      return route.abort();
    });
    page.on("console", (m) => {
      if (m.type() === "error") out.console_errors.push(m.text());
    });
    page.on("pageerror", (e) => out.page_errors.push(String(e.stack || e)));
    await fn(page, out);
  } catch (e) {
    // What the page said explains most failures.
    e.stack = (e.stack || String(e)) + "\nseen so far: " + JSON.stringify(out).slice(0, 4000);
    throw e;
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  return out;
}

const url = "file://" + path.resolve(report);
const shot = (page, name) => page.screenshot({ path: path.join(shots, name + ".png"), fullPage: false });

// Per frame name, its widest frame's width: how wide the weight draws it.
const widths = (page) =>
  page.evaluate(() => {
    const w = {};
    for (const g of document.querySelectorAll("#flame g.frame")) {
      const name = g.getAttribute("name");
      const width = Number(g.querySelector("rect").getAttribute("width"));
      w[name] = Math.max(w[name] || 0, width);
    }
    return w;
  });
// Waits for the flamegraph's transitions to end, then reads its widths. A
// change (weight, inversion) schedules its d3 transitions at once, in the
// event handler, on the frames' elements, and d3 deletes an element's
// `__transition` when its last one has ended: so no element of the chart
// with one left means drawn. (Two equal readings some time apart, which
// this once waited for, also come of a renderer too starved to run a
// frame between them.)
async function settled(page) {
  await page.waitForFunction(() => [...document.querySelectorAll("#flame *")].every((n) => !n.__transition), null, {
    polling: 50,
  });
  return widths(page);
}
// Names of the frames one level under the root ("all").
const firstLevel = (page) =>
  page.evaluate(() =>
    d3
      .select("#flame")
      .selectAll("g.frame")
      .data()
      .filter((d) => d.depth === 1)
      .map((d) => d.data.n)
      .sort()
  );

async function profile(page, out) {
  await page.goto(url);
  await page.waitForSelector("#flame g.frame");
  out.tabs = await page.$$eval("#tabs button", (b) => b.map((x) => x.id));
  out.notes = await page.$$eval("ul.notes li", (l) => l.map((x) => x.textContent));
  const f = (out.flame = {});
  f.total = await page.textContent("#flame-total");
  f.bytes = await settled(page);
  f.frames = Object.keys(f.bytes).length;
  await shot(page, "flamegraph");
  await page.selectOption("#weight", "0");
  f.count = await settled(page);
  f.total_count = await page.textContent("#flame-total");
  await page.selectOption("#weight", "4");
  f.leaked = await settled(page);
  f.weight_options = await page.$$eval("#weight option", (o) => o.map((x) => [x.textContent, x.disabled]));
  // Temporary allocations: offered only when measured (exact stacks).
  if (!f.weight_options[5][1]) {
    await page.selectOption("#weight", "5");
    f.temporary = await settled(page);
    f.total_temporary = await page.textContent("#flame-total");
  }
  await page.selectOption("#weight", "1");
  await settled(page);
  await page.fill("#search", search);
  await page.waitForTimeout(100);
  f.search_marked = await page.$$eval("#flame g.frame rect", (r) =>
    r.filter((x) => (x.getAttribute("fill") || "").toUpperCase() === "#E600E6").map((x) => x.parentNode.getAttribute("name"))
  );
  f.search_details = await page.textContent("#flame-details");
  await shot(page, "flamegraph-search");
  await page.fill("#search", "");
  f.first_level = await firstLevel(page);
  await page.check("#inverted");
  await settled(page);
  f.inverted_first_level = await firstLevel(page);
  await shot(page, "flamegraph-inverted");
  await page.uncheck("#inverted");
  await settled(page);
  // Hover, then click (zoom) the searched function's widest frame.
  const target = `#flame g.frame[name="${search}"]`;
  await page.dispatchEvent(target, "mouseover");
  f.hover = await page.textContent("#flame-details");
  await page.click(target, { force: true });
  f.clicked = await page.textContent("#frame-figures");

  await page.click("#tab-functions");
  await page.waitForSelector("#functions tbody tr");
  const fns = (out.functions = {});
  const firstRows = () => page.$$eval("#functions tbody tr", (r) => r.slice(0, 5).map((x) => x.dataset.name));
  fns.by_total = await firstRows();
  await page.click('#functions th[data-sort="self"]');
  fns.by_self = await firstRows();
  fns.self_header = await page.getAttribute('#functions th[data-sort="self"]', "class");
  await page.click(`#functions tr.fn-row[data-name="${search}"]`);
  fns.callers = await page.$$eval("#fn-peek table.callers tbody tr td:first-child", (t) => t.map((x) => x.textContent));
  fns.callees = await page.$$eval("#fn-peek table.callees tbody tr td:first-child", (t) => t.map((x) => x.textContent));
  await shot(page, "functions");
  // Lifetimes, where recorded: sortable by the share of short-lived
  // blocks, and a function's histogram in its peek.
  if (await page.$('#functions th[data-sort="shortLived"]')) {
    await page.click('#functions th[data-sort="shortLived"]');
    fns.by_short_lived = await firstRows();
    fns.short_lived_cells = await page.$$eval("#functions tbody tr", (r) => r.slice(0, 8).map((x) => [x.dataset.name, x.querySelector("td.short-lived").textContent]));
    await page.click('#functions th[data-sort="shortLived"]');
    fns.by_short_lived_asc = await firstRows();
    // (Sampled stacks rarely catch its four small blocks.)
    if (await page.$('#functions tr.fn-row[data-name="long_lived"]')) {
      await page.click('#functions tr.fn-row[data-name="long_lived"]');
      fns.long_lived_histogram = await page.$$eval("#fn-peek table.fn-lifetimes tbody tr", (r) => r.map((x) => [...x.children].slice(0, 2).map((c) => c.textContent)));
      await shot(page, "functions-lifetimes");
    }
  }

  await page.click("#tab-timeline");
  const t = (out.timeline = {});
  t.peaks = await page.$$eval("#timeline .peak-marker", (g) => g.map((x) => Number(x.dataset.bytes)));
  t.peak_labels = await page.$$eval("#timeline .peak-marker text", (g) => g.map((x) => x.textContent));
  t.lines = await page.$$eval("#timeline path.live", (p) => p.length);
  t.temporary_lines = await page.$$eval("#temporary-timeline path.temporary", (p) => p.map((x) => Number(x.dataset.last)));
  t.histogram_rows = await page.$$eval("#size-histogram tbody tr", (r) => r.length);
  await shot(page, "timeline");

  await page.click("#tab-summary");
  const s = (out.summary = {});
  s.rows = await page.$$eval("table.summary tbody tr", (r) => r.map((x) => [...x.children].map((c) => c.textContent)));
  s.calls = await page.$$eval("table.calls tbody tr td:first-child", (r) => r.map((x) => x.textContent));
  s.temporaries = await page.$$eval("#temporaries", (p) => p.map((x) => x.textContent));
  s.lifetimes_line = await page.$$eval("#lifetimes-line", (p) => p.map((x) => x.textContent));
  s.lifetimes_histogram = await page.$$eval("table.lifetimes-all tbody tr", (r) => r.map((x) => [...x.children].slice(0, 2).map((c) => c.textContent)));
  await shot(page, "summary");
}

// The summary view alone (a run without stacks).
async function summary(page, out) {
  await page.goto(url);
  await page.waitForSelector("table.summary");
  out.rows = await page.$$eval("table.summary tbody tr", (r) => r.map((x) => [...x.children].map((c) => c.textContent)));
  out.hints = await page.$$eval("#view-summary p.hint", (p) => p.map((x) => x.textContent));
  out.calls_tables = await page.$$eval("table.calls", (t) => t.length);
  await shot(page, "summary");
}

async function compare(page, out) {
  await page.goto(url);
  await page.waitForSelector("#verdict");
  out.verdict = await page.textContent("#verdict");
  out.table = await page.textContent("pre.table");
  out.side_by_side = await page.$$eval("#compare-table tbody tr", (r) => r.map((x) => [...x.children].map((c) => c.textContent)));
  // The chart is an image: decoded, and as wide as drawn.
  await page.waitForFunction(() => document.getElementById("compare-chart").complete);
  out.chart_width = await page.$eval("#compare-chart", (i) => i.naturalWidth);
  await shot(page, "compare");
}

async function diff(page, out) {
  await page.goto(url);
  await page.waitForSelector("#diff-frame");
  const frame = page.frameLocator("#diff-frame");
  await frame.locator("svg g").first().waitFor();
  out.diff_frames = await frame.locator("svg #frames g").count();
  out.diff_titles = await frame.locator("svg #frames g title").allTextContents();
  out.diff_summary = await page.$$eval("#diff-summary tbody tr", (r) => r.map((x) => [...x.children].map((c) => c.textContent)));
  // Where the root frame ("all") is drawn, in the page's coordinates: in
  // view when the page opens, not below the fold.
  const root = await frame.locator("svg #frames g").filter({ has: frame.locator("title", { hasText: /^all \(/ }) }).first().boundingBox();
  out.diff_root_top = root ? root.y : null;
  out.viewport_height = page.viewportSize().height;
  await shot(page, "diff");
}

// First render: from navigation start to the flamegraph's root frame drawn
// (its width and label set), as the page's own clock measures it; the
// median is the caller's.
async function render(page, out) {
  out.render_ms = [];
  for (let i = 0; i < Number(runs); i++) {
    await page.goto(url);
    // Drawn: the root frame has its width and its label.
    await page.waitForFunction(
      () => {
        const g = document.querySelector("#flame g.frame");
        return g && Number(g.querySelector("rect").getAttribute("width")) > 0 && g.querySelector("div").textContent.length > 0;
      },
      null,
      { timeout: 120000 }
    );
    out.render_ms.push(await page.evaluate(() => performance.now()));
  }
  out.frames = await page.$$eval("#flame g.frame", (g) => g.length);
  out.notes = await page.$$eval("ul.notes li", (l) => l.map((x) => x.textContent));
  await settled(page);
  await shot(page, "render");
}

const modes = { profile, summary, compare, diff, render };
(async () => {
  if (!modes[mode]) throw new Error("unknown mode " + mode);
  fs.mkdirSync(shots, { recursive: true });
  const out = await withPage(modes[mode]);
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
