// Rendering: turns core.js state into SVG and HTML. Text always goes in through
// textContent, so token text or output containing markup is shown, never run.

import { LAYOUT, describeNode, formatNumber, outputSegments, shadeClass, tokenLabel, truncate } from "./core.js";

const SVG = "http://www.w3.org/2000/svg";

export function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) node.setAttribute(key, value);
  if (text != null) node.textContent = text;
  return node;
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) node.setAttribute(key, String(value));
  if (text != null) node.textContent = text;
  return node;
}

// ---------------------------------------------------------------- tree

/**
 * Draws a laid-out tree into `svg`. Nodes not drawn in the previous call fade in,
 * so a new draft layer is seen arriving; `tooltip` explains a node on hover.
 */
export function renderTree(svg, layout, tooltip) {
  const seen = svg.__drawn ?? new Set();
  svg.replaceChildren();
  svg.setAttribute("width", layout.width);
  svg.setAttribute("height", layout.height);
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  svg.append(layerHeaders(layout));
  const edges = svgEl("g", { class: "edges" });
  for (const edge of layout.edges) edges.append(edgePath(edge));
  const nodes = svgEl("g", { class: "nodes" });
  for (const node of layout.nodes) nodes.append(nodeGroup(node, !seen.has(node.id), tooltip));
  svg.append(edges, nodes);
  svg.__drawn = new Set(layout.nodes.map((n) => `${n.id}`));
}

/** Forgets what was drawn, so the next tree (another step) fades in as a whole. */
export function resetTree(svg) {
  svg.__drawn = new Set();
}

function layerHeaders(layout) {
  const group = svgEl("g", { class: "layer-headers" });
  for (const layer of layout.layers) {
    const x = LAYOUT.left + layer.depth * LAYOUT.column;
    // Talon's bar is relative to the layer's best path (anchor m_d); other policies may report a plain bar.
    const bar = layer.anchor != null ? "μ·m_d" : "bar";
    const label = layer.threshold != null ? `${bar} ${formatThreshold(layer.threshold)}` : `depth ${layer.depth}`;
    const text = svgEl("text", { x, y: 14, class: layer.threshold != null ? "layer-threshold" : "layer-depth" }, label);
    text.append(svgEl("title", {}, layer.threshold != null
      ? `depth ${layer.depth}: keep candidates with path score ≥ ${layer.threshold}` +
        (layer.anchor != null ? ` = μ·m_d, where m_d = ${layer.anchor} is the layer's best path score` : "")
      : `depth ${layer.depth}`));
    group.append(text);
  }
  return group;
}

function formatThreshold(value) {
  return value >= 0.001 ? value.toFixed(3) : value.toExponential(1);
}

function edgePath(edge) {
  const x1 = edge.from.x + LAYOUT.nodeWidth;
  const y1 = edge.from.y + LAYOUT.nodeHeight / 2;
  const x2 = edge.to.x;
  const y2 = edge.to.y + LAYOUT.nodeHeight / 2;
  const mid = (x1 + x2) / 2;
  return svgEl("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, class: `edge ${edge.status}` });
}

function nodeGroup(node, entering, tooltip) {
  const isRoot = node.status === "root";
  const group = svgEl("g", {
    class: `node ${node.status}${entering ? " entering" : ""}`,
    transform: `translate(${node.x},${node.y})`,
    "data-status": isRoot ? null : node.status,
    "data-role": isRoot ? "root" : null,
    "data-depth": node.depth,
    "data-node": node.id,
    tabindex: 0,
  });
  group.append(svgEl("rect", { width: LAYOUT.nodeWidth, height: LAYOUT.nodeHeight, rx: 4 }));
  const label = isRoot ? `…${truncate(tokenLabel(node.text), 7)}` : truncate(tokenLabel(node.text));
  group.append(svgEl("text", { x: 6, y: 13 }, label));
  if (node.hiddenPruned) {
    group.append(svgEl("text", { x: LAYOUT.nodeWidth + 3, y: 13, class: "hidden-count" }, `+${node.hiddenPruned}`));
  }
  if (tooltip) tooltip.attach(group, node);
  return group;
}

// ---------------------------------------------------------------- tooltip

/** Hover explains, click pins (and a second click or Escape unpins). */
export function createTooltip(box) {
  let pinned = null;
  const show = (node, event) => {
    const table = el("table");
    for (const [key, value] of describeNode(node)) {
      const row = el("tr");
      row.append(el("th", {}, key), el("td", {}, value));
      table.append(row);
    }
    box.replaceChildren(table);
    box.hidden = false;
    // Beside the pointer, flipped to its left where the panel's right edge would cut the box off.
    const rect = box.parentElement.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const left = x + 14 + box.offsetWidth > rect.width ? x - 14 - box.offsetWidth : x + 14;
    box.style.left = `${Math.max(0, left)}px`;
    box.style.top = `${Math.max(0, event.clientY - rect.top + 14)}px`;
  };
  const hide = () => {
    if (!pinned) box.hidden = true;
  };
  return {
    attach(group, node) {
      group.addEventListener("mouseenter", (event) => pinned || show(node, event));
      group.addEventListener("mouseleave", hide);
      // Keyboard users reach nodes with Tab; the tooltip then sits by the node instead of the pointer.
      group.addEventListener("focus", () => {
        const box = group.getBoundingClientRect();
        pinned || show(node, { clientX: box.right, clientY: box.top });
      });
      group.addEventListener("blur", hide);
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        pinned = pinned === node.id ? null : node.id;
        box.classList.toggle("pinned", Boolean(pinned));
        show(node, event);
      });
    },
    unpin() {
      pinned = null;
      box.classList.remove("pinned");
      box.hidden = true;
    },
  };
}

// ---------------------------------------------------------------- output, metrics, timeline

/** Generated text, one span per step, shaded by how many drafts that step accepted. */
export function renderOutput(box, run) {
  box.replaceChildren();
  for (const segment of outputSegments(run)) {
    const title = segment.step == null ? "final text"
      : `step ${segment.step}: ${segment.accepted} accepted + 1 from the target`;
    box.append(el("span", { class: `step-chunk ${shadeClass(segment.accepted)}`, title }, segment.text));
  }
}

export function renderMetrics(box, summary, speedup, onPick = null) {
  const values = [
    ["τ", formatNumber(summary.tau), "mean tokens per step (accepted + 1)"],
    ["δ", formatNumber(summary.delta), "mean draft forwards per step"],
    ["tokens/s", formatNumber(summary.tokensPerS, 1), "generated tokens per second of wall time"],
    ["steps", String(summary.steps), "draft-then-verify cycles"],
    ["tokens", String(summary.tokens), "generated tokens"],
    ["c", formatNumber(summary.c, 3), "draft forward time / verify forward time"],
    ["speedup vs ar", speedup == null ? "run ar to see" : `${formatNumber(speedup)}×`, "tokens/s over plain decoding with the same setup"],
  ];
  const grid = el("dl", { class: "metric-values" });
  for (const [name, value, help] of values) {
    const item = el("div", { title: help, class: "metric" });
    item.append(el("dt", {}, name), el("dd", {}, value));
    grid.append(item);
  }
  const charts = el("div", { class: "metric-charts" });
  charts.append(
    barChart("accepted per step", summary.series.accepted, "accepted", { onPick }),
    barChart("tree size per step", summary.series.treeSize, "tree-size", { onPick }),
    barChart("tree depth per step", summary.series.depth, "tree-depth", { onPick }),
    barChart("tree width per step", summary.series.width, "tree-width", { onPick }),
  );
  box.replaceChildren(grid, charts, adjustmentList(summary.adjustments ?? []));
}

/** An adaptive policy's parameter changes, latest last, so a lecture can point at them. */
function adjustmentList(adjustments) {
  const list = el("ul", { class: "adjustments" });
  for (const a of adjustments.slice(-5)) {
    list.append(el("li", {}, `step ${a.step}: ${a.param} ${formatNumber(a.old, 3)} → ${formatNumber(a.new, 3)} (${a.why})`));
  }
  if (adjustments.length > 5) list.prepend(el("li", { class: "hint" }, `${adjustments.length - 5} earlier adjustments`));
  return list;
}

/** A small bar chart, one bar per step, with its maximum labelled. */
export function barChart(title, values, kind, { width = 220, height = 44, onPick = null } = {}) {
  const figure = el("figure", { class: `chart ${kind}` });
  const max = Math.max(1, ...values);
  figure.append(el("figcaption", {}, `${title} (max ${values.length ? Math.max(...values) : 0})`));
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const barWidth = values.length ? Math.max(1, Math.min(12, width / values.length)) : 0;
  values.forEach((value, i) => {
    const barHeight = (value / max) * (height - 2);
    const bar = svgEl("rect", { x: i * barWidth, y: height - barHeight, width: Math.max(1, barWidth - 1), height: barHeight });
    svg.append(bar);
    // A full-height target per step, so a step with a tiny bar can still be picked.
    const hit = svgEl("rect", { x: i * barWidth, y: 0, width: barWidth, height, class: "hit" });
    hit.append(svgEl("title", {}, `step ${i + 1}: ${value}${onPick ? " (click to show its tree)" : ""}`));
    if (onPick) hit.addEventListener("click", () => onPick(i));
    svg.append(hit);
  });
  figure.append(svg);
  return figure;
}

/** One cell per step, shaded by accepted drafts; clicking or the slider picks the step shown. */
export function renderTimeline(box, run, shownIndex, onPick) {
  const slider = box.querySelector("input[type=range]");
  const cells = box.querySelector(".timeline-cells");
  const count = run.steps.length;
  slider.max = String(Math.max(0, count - 1));
  slider.value = String(Math.max(0, shownIndex));
  slider.disabled = count === 0;
  box.querySelector(".timeline-label").textContent = timelineLabel(shownIndex, count);
  cells.replaceChildren();
  run.steps.forEach((step, i) => {
    const accepted = step.text?.accepted ?? null;
    const cell = el("button", { type: "button", class: `timeline-cell ${shadeClass(accepted)}${i === shownIndex ? " current" : ""}`,
                                title: `step ${step.step}: ${accepted ?? "?"} accepted`, "aria-label": `step ${step.step}` });
    cell.addEventListener("click", () => onPick(i));
    cells.append(cell);
  });
}

function timelineLabel(shownIndex, count) {
  if (!count) return "no steps yet";
  return shownIndex < 0 ? `start · ${count} steps` : `step ${shownIndex + 1} of ${count}`;
}
