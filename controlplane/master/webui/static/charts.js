// Charts of the experiment and trial pages, drawn with uPlot (hover values and legend are uPlot's).
//
// - <section data-chart data-series-url="/ui/data/..."> with selects data-chart-metric
//   ("group:name"), data-chart-x (batches|time) and a data-chart-log checkbox: fetches the
//   downsampled series (one per trial) and draws one curve each. The plot element records what it
//   drew in data-series-count, data-point-counts ("n,n,...") and data-trial-ids, so tests can
//   compare it with the API. data-live="1" refetches every 5 s.
// - <div data-scatter data-points='{"lr": {"x": [...], "y": [...], "categories": [...]}}'>:
//   one scatter per hyperparameter, the searcher metric against its values.
"use strict";

(() => {
  const PALETTE = ["#2b5cab", "#d9480f", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c2255c", "#5c940d",
    "#1864ab", "#862e9c"];
  const color = (i) => PALETTE[i % PALETTE.length];

  function width(el) { return Math.max(200, el.clientWidth - 16); }  // its box's width: a phone's too

  function draw(plot, existing, opts, data) {
    if (existing) existing.destroy();
    plot.textContent = "";
    return new window.uPlot(opts, data, plot);
  }

  function setupChart(panel) {
    const plot = panel.querySelector("[data-chart-plot]");
    const metric = panel.querySelector("[data-chart-metric]");
    const xaxis = panel.querySelector("[data-chart-x]");
    const log = panel.querySelector("[data-chart-log]");
    if (!plot || !metric || !metric.value) return;
    let chart = null;
    let asked = 0;  // the latest request: an older answer arriving after it is dropped

    async function load() {
      const mine = ++asked;
      const [group, ...rest] = metric.value.split(":");
      const params = new URLSearchParams({ group, metric: rest.join(":"), x: xaxis.value,
        points: String(Math.min(4000, width(plot) * 2)) });
      try {
        const r = await fetch(`${panel.dataset.seriesUrl}?${params}`, { credentials: "same-origin",
          headers: { "Accept": "application/json" } });
        if (!r.ok) throw new Error(`${r.status} ${r.statusText}`);
        const body = await r.json();
        if (mine === asked) render(body);
      } catch (err) {
        plot.dataset.error = err.message;
      }
    }

    function render(body) {
      const drawn = body.series.filter((s) => s.x.length > 0);
      plot.dataset.seriesCount = String(drawn.length);
      plot.dataset.pointCounts = drawn.map((s) => s.x.length).join(",");
      plot.dataset.trialIds = drawn.map((s) => s.trialId).join(",");
      plot.dataset.drawn = `${body.group}:${body.metric}`;  // what the figures above are of
      if (!drawn.length) { if (chart) chart.destroy(); chart = null; plot.textContent = "No values yet."; return; }
      // uPlot draws series over one x: join() aligns them, null where a trial has no point.
      const data = window.uPlot.join(drawn.map((s) => [s.x, s.y]));
      const time = body.x === "time";
      const opts = {
        width: width(plot), height: 320,
        scales: { x: { time }, y: { distr: log.checked ? 3 : 1 } },
        axes: [{ label: time ? "" : "batches" }, { label: `${body.group} ${body.metric}`, size: 70 }],
        series: [{ label: time ? "time" : "batches" },
          ...drawn.map((s, i) => ({ label: `trial ${s.trialId}${s.downsampled ? " (downsampled)" : ""}`,
            stroke: color(i), width: 1.5, spanGaps: true, points: { show: s.x.length < 60 } }))],
      };
      if (log.checked) {  // a log scale cannot show values <= 0
        for (let i = 1; i < data.length; i++) data[i] = data[i].map((v) => (v != null && v > 0 ? v : null));
      }
      chart = draw(plot, chart, opts, data);
    }

    [metric, xaxis, log].forEach((el) => el.addEventListener("change", load));
    if (panel.dataset.live) setInterval(() => { if (!document.hidden) load(); }, 5000);
    load();
  }

  function setupScatter(grid) {
    let points;
    try { points = JSON.parse(grid.dataset.points); } catch (_) { return; }
    // A hyperparameter every trial shares says nothing: no plot for it.
    const shown = Object.entries(points).filter(([, h]) => new Set(h.x).size > 1);
    // Every box is laid out before any plot is sized to it.
    const boxes = shown.map(([name]) => {
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.hparam = name;
      grid.appendChild(box);
      return box;
    });
    shown.forEach(([name, h], n) => {
      const box = boxes[n];
      // uPlot wants x ascending: sort the trials by the hyperparameter's value.
      const order = h.x.map((_, i) => i).sort((a, b) => h.x[a] - h.x[b]);
      const cats = h.categories;
      const opts = {
        width: width(box), height: 240, title: name,
        scales: { x: { time: false } },
        axes: [{ label: name, values: cats.length ? (_, ticks) => ticks.map((t) => cats[t] ?? "") : undefined },
          { label: grid.dataset.metric, size: 70 }],
        series: [{ label: name }, { label: grid.dataset.metric, stroke: color(0), paths: () => null,
          points: { show: true, size: 7, fill: color(0) } }],
      };
      new window.uPlot(opts, [order.map((i) => h.x[i]), order.map((i) => h.y[i])], box);
    });
  }

  function init() {
    if (!window.uPlot) return;
    document.querySelectorAll("[data-chart]").forEach(setupChart);
    document.querySelectorAll("[data-scatter]").forEach(setupScatter);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
