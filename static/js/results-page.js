// Wiring of /results: a bench results.json, shipped or opened from disk, drawn as tables and charts, each
// chart downloadable as SVG or PNG and the whole report as CSV.

import { formatNumber } from "./model/format.js";
import { baselinePolicy } from "./model/policies.js";
import {
  PALETTE, acceptLengthSeries, acceptanceByDepthSeries, batchSweepSeries, categoryHeads, categoryRows, checkReport, coloursOf,
  costSeries, describeReport, intervalText, reportVersion, resultsCsv, speedupSeries, summaryRows, tauByCategorySeries,
  tauVsSizeSeries, timeSplitSeries, withBaseline,
} from "./model/results.js";
import { costChart, speedupChart, tauByCategoryChart, tauVsSizeChart } from "./view/charts.js";
import { el } from "./view/dom.js";
import { chartSvgText, download, svgToPng } from "./view/export.js";
import {
  acceptLengthChart, acceptanceByDepthChart, batchSweepChart, chartWidth, timeSplitChart,
} from "./view/results-charts.js";

const $ = (id) => document.getElementById(id);

function setStatus(text, kind = "") {
  $("results-status").textContent = text;
  $("results-status").className = `status ${kind}`;
}

let shown = null; // the report on screen, redrawn when the charts' width changes
let shownName = "results"; // the file it came from, without .json: the downloads are named after it
// The policy that drafts nothing, as the server serves the policies: what a report without its own baseline is over.
const served = fetch("/api/policies").then((r) => r.json()).then(baselinePolicy);

async function show(data, source) {
  const report = withBaseline(data, await served);
  checkReport(report);
  shown = report;
  shownName = source.replace(/\.json$/i, "") || "results";
  $("results-meta").textContent = describeReport(report);
  $("results-memory-note").textContent = report.memory_note ? `Note: ${report.memory_note}` : "";
  $("results-memory-note").hidden = !report.memory_note;
  renderVersionNote(report);
  $("results-export-csv").disabled = false;
  renderTable(report);
  renderCategories(report);
  drawCharts();
  setStatus(`showing ${source}`, "done");
}

function drawCharts() {
  if (!shown) return;
  const colours = coloursOf(shown.results, shown.baseline);
  const size = { width: chartWidth($("results-charts").clientWidth) };
  const versioned = { ...size, version: reportVersion(shown) };
  $("results-charts").dataset.width = String(size.width);
  const figures = [
    speedupChart(speedupSeries(shown), colours, { ...size, intervalLevel: shown.interval?.level ?? null }),
    timeSplitChart(timeSplitSeries(shown), size),
    tauByCategoryChart(tauByCategorySeries(shown), colours, size),
    acceptanceByDepthChart(acceptanceByDepthSeries(shown), colours, versioned),
    acceptLengthChart(acceptLengthSeries(shown), colours, versioned),
    tauVsSizeChart(tauVsSizeSeries(shown), colours, size),
    costChart(costSeries(shown), PALETTE, size),
  ];
  const sweep = batchSweepSeries(shown);
  if (sweep) figures.splice(1, 0, batchSweepChart(sweep, colours, size)); // a sweep's own question, after speedups
  for (const figure of figures) figure.append(exportButtons(figure));
  $("results-charts").replaceChildren(...figures);
}

// Each chart downloads as the SVG it is, or as a PNG drawn from that SVG, named after the report and the chart.
function exportButtons(figure) {
  const kind = figure.querySelector("svg.chart-svg").dataset.chart;
  const bar = el("div", { class: "chart-export-buttons" });
  const svgButton = el("button", { type: "button", "data-testid": "chart-export-svg", "data-chart": kind }, "SVG");
  const pngButton = el("button", { type: "button", "data-testid": "chart-export-png", "data-chart": kind }, "PNG");
  svgButton.addEventListener("click", () => download(`${shownName}-${kind}.svg`, chartSvgText(figure), "image/svg+xml"));
  pngButton.addEventListener("click", async () => {
    try {
      download(`${shownName}-${kind}.png`, await svgToPng(chartSvgText(figure)), "image/png");
    } catch (err) {
      setStatus(`cannot draw ${kind} as PNG: ${err.message}`, "error");
    }
  });
  bar.append(el("span", { class: "hint" }, "download"), svgButton, pngButton);
  return bar;
}

function renderVersionNote(report) {
  const version = reportVersion(report);
  const missing = acceptanceByDepthSeries(report) == null;
  $("results-version").textContent = missing
    ? `Report version ${version}: benchmarked before the bench kept per-depth acceptance and tokens per step, ` +
      "so those two charts are empty; a run of the current specscope bench fills them."
    : `Report version ${version}.`;
  $("results-version").classList.toggle("warning", missing);
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (String(chartWidth($("results-charts").clientWidth)) !== $("results-charts").dataset.width) drawCharts();
  }, 150);
});

function renderTable(report) {
  const body = $("results-table").querySelector("tbody");
  body.replaceChildren();
  for (const row of summaryRows(report)) {
    const tr = el("tr", { "data-policy": row.policy });
    const cells = [row.policy, formatNumber(row.tau), formatNumber(row.delta), formatNumber(row.c, 3),
                   formatNumber(row.tokensPerS, 1), row.speedup == null ? "–" : `${formatNumber(row.speedup)}×`,
                   row.steps == null ? "–" : String(row.steps), row.equality];
    for (const text of cells) tr.append(el("td", {}, text));
    if (row.speedupInterval) {
      const [low, high] = row.speedupInterval;
      tr.children[5].append(" ", el("small", { class: "speedup-interval", "data-testid": "speedup-interval" },
                                     `(${formatNumber(low)}–${formatNumber(high)})`));
    }
    tr.lastChild.classList.add("equality");
    body.append(tr);
  }
  const hint = intervalText(report);
  $("results-interval-hint").textContent = hint ?? "";
  $("results-interval-hint").hidden = !hint;
}

function renderCategories(report) {
  const table = $("results-categories");
  const head = el("tr");
  head.append(el("th", { scope: "col" }, "policy"));
  for (const { name, prompts } of categoryHeads(report)) {
    const th = el("th", { scope: "col", "data-prompts": prompts ?? "" }, name || "—");
    if (prompts != null) th.append(el("br"), el("small", { class: "sample-size" }, `n = ${prompts}`));
    head.append(th);
  }
  const all = el("th", { scope: "col" }, "all");
  all.append(el("br"), el("small", { class: "sample-size" }, `n = ${report.prompts}`));
  head.append(all);
  table.tHead.replaceChildren(head);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const row of categoryRows(report)) {
    const tr = el("tr", { "data-policy": row.policy });
    tr.append(el("td", {}, row.policy));
    for (const cell of row.cells) {
      const speedup = cell?.speedup == null ? "–" : `${formatNumber(cell.speedup)}×`;
      tr.append(el("td", {}, cell?.tau == null ? speedup : `${speedup} · ${formatNumber(cell.tau)}`));
    }
    body.append(tr);
  }
}

async function loadShipped(url) {
  if (!url) {
    setStatus("no results are shipped with this server: open a results.json", "");
    return;
  }
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    await show(await response.json(), url.split("/").pop());
  } catch (err) {
    setStatus(`cannot show ${url}: ${err.message}`, "error");
  }
}

async function loadFile(file) {
  try {
    await show(JSON.parse(await file.text()), file.name);
  } catch (err) {
    setStatus(`cannot show ${file.name}: ${err.message}`, "error");
  }
}

function start() {
  const picker = $("results-shipped");
  const shipped = [...picker.options].filter((option) => option.value);
  const wanted = new URLSearchParams(location.search).get("file");
  const match = shipped.find((option) => option.textContent === wanted);
  if (match) picker.value = match.value;
  picker.addEventListener("change", () => {
    history.replaceState(null, "", `?file=${encodeURIComponent(picker.selectedOptions[0].textContent)}`);
    loadShipped(picker.value);
  });
  $("results-export-csv").addEventListener("click", () => {
    if (shown) download(`${shownName}.csv`, resultsCsv(shown), "text/csv");
  });
  $("results-upload").addEventListener("change", (event) => {
    const [file] = event.target.files;
    if (file) loadFile(file);
  });
  loadShipped(picker.value).then(() => {
    if (wanted && !match) {
      const names = shipped.map((option) => option.textContent).join(", ") || "none";
      setStatus(`no shipped results named "${wanted}" (shipped: ${names}); showing the first`, "error");
    }
  });
}

start();
