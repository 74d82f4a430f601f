// Draws a laid-out tree as SVG, with a tooltip that explains each node.

import { describeNode } from "../model/events.js";
import { tokenLabel, truncate } from "../model/format.js";
import { LAYOUT } from "../model/layout.js";
import { el, svgEl } from "./dom.js";

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
