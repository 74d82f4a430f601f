// Where each node of a step's tree goes on screen: depth left to right (the way the tokens read),
// siblings top to bottom by path score. A parent sits on the row of its first child, so the root is
// always at the top left and the best-scored path runs along the top row; a deep-narrow tree is a
// long line, a shallow-wide one a tall comb. Coordinates are in px at zoom 1 (labels 15 px). No DOM.

import { tokenLabel, truncate } from "./format.js";

export const LAYOUT = {
  font: 15, // label size at zoom 1
  char: 9.1, // width of one monospace character at that size (DejaVu Sans Mono: 0.602 em)
  pad: 8, // label padding inside a node
  nodeHeight: 26,
  row: 34, // vertical pitch of node rows
  chipRow: 30, // and of "+k more" rows
  gap: 18, // horizontal gap between columns
  header: 80, // room above the tree for each layer's title, its bar and its folded count
  left: 12,
  maxLabel: 9, // characters before the label of a decided node (accepted, rejected, …) is cut
  maxWaiting: 8, // and of a kept or pruned one: columns stay narrow enough for a long accepted path
};

// Marks that tell the verdicts apart without colour.
export const MARKS = { accepted: "✓", rejected: "✗", recovered: "↺", bonus: "★" };

/** A node's label: its mark, then its token with whitespace made visible, cut to fit. */
export function nodeLabel(node) {
  if (node.status === "root") return node.token == null ? "prompt…" : `…${truncate(tokenLabel(node.shown ?? node.text), 7)}`;
  // Plain decoding's token is the target's own, not a bonus: no ★.
  const mark = node.plain ? null : MARKS[node.status];
  const text = truncate(tokenLabel(node.shown ?? node.text), mark ? LAYOUT.maxLabel : LAYOUT.maxWaiting);
  return mark ? `${mark} ${text}` : text;
}

function nodeWidth(label) {
  return Math.max(40, Math.round(LAYOUT.pad * 2 + Array.from(label).length * LAYOUT.char));
}

/**
 * Lays out a folded step.
 *
 * Candidates that would crowd the picture collapse into a count per layer (shown in the layer's
 * header; `expandedLayers` lists the depths opened) and, within an opened layer, past `perParent`
 * per parent into a "+k more" chip (`expandedParents` lists the parents opened). Collapsible are
 * pruned candidates, and, while the tree is still growing, kept candidates the policy did not grow
 * (eagle keeps a whole layer for its rerank but grows only its top K).
 * `maxPruned` (compare panes) opens every layer with that many per parent.
 *
 * Returns { nodes, chips, edges, layers, width, height }; nodes carry x, y (top left), w, h, label
 * and `hidden` (its collapsed children).
 * Example: root -> a (kept, score .6), b (pruned): a on row 0 with the root, b counted in layer 1's header.
 */
export function layoutTree(step, { expandedLayers = new Set(), expandedParents = new Set(), perParent = 6,
                                   maxPruned = null } = {}) {
  const growing = !step.tree;
  const openLayer = (depth) => maxPruned != null || expandedLayers.has(depth);
  const cap = (parent) => (expandedParents.has(parent) ? Infinity : maxPruned ?? perParent);
  const kids = childrenOf(step);

  const placed = [];
  const chips = [];
  const hiddenByLayer = new Map();
  let y = LAYOUT.header;
  const place = (node) => {
    const all = kids.get(node.id) ?? [];
    const shown = [];
    const folded = [];
    for (const child of all) {
      if (!collapsible(child, growing, kids)) shown.push(child);
      else if (openLayer(child.depth) && shownFolded(shown, growing, kids) < cap(node.id)) shown.push(child);
      else folded.push(child);
    }
    const entry = { ...node, hidden: folded.length, hiddenPruned: folded.length, y: null };
    placed.push(entry);
    if (!shown.length) {
      entry.y = y;
      y += LAYOUT.row;
    }
    for (const child of shown) {
      const placedChild = place(child);
      if (entry.y == null) entry.y = placedChild.y;
    }
    const openFolded = folded.filter((c) => openLayer(c.depth));
    if (openFolded.length) {
      chips.push({ id: `more:${node.id}`, kind: "parent", parent: node.id, depth: openFolded[0].depth, y,
                   count: openFolded.length, reasons: countReasons(openFolded) });
      y += LAYOUT.chipRow;
    }
    for (const child of folded) if (!openLayer(child.depth)) addHidden(hiddenByLayer, child);
    return entry;
  };
  const root = step.nodes.get("n0");
  if (root) place(root);

  const columns = columnsOf(placed);
  const nodes = placed.map((node) => {
    const label = nodeLabel(node);
    return { ...node, label, x: columns.x[node.depth], w: nodeWidth(label), h: LAYOUT.nodeHeight };
  });
  for (const chip of chips) {
    chip.x = columns.x[chip.depth] ?? columns.x[columns.x.length - 1];
    chip.label = `+${chip.count} more`;
    chip.w = nodeWidth(chip.label);
    chip.h = LAYOUT.nodeHeight - 4;
  }
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges = nodes.filter((n) => n.parent && byId.has(n.parent))
    .map((n) => ({ from: byId.get(n.parent), to: n, status: n.status }));
  const layers = layerHeaders(step, columns, hiddenByLayer, openLayer);
  const right = Math.max(...nodes.map((n) => n.x + n.w), ...chips.map((c) => c.x + c.w),
                         ...layers.map((l) => l.x + l.w), 0);
  return { nodes, chips, edges, layers, width: right + LAYOUT.left, height: Math.max(y, LAYOUT.header + LAYOUT.row) };
}

function childrenOf(step) {
  const kids = new Map();
  for (const node of step.nodes.values()) {
    if (node.parent == null) continue;
    if (!kids.has(node.parent)) kids.set(node.parent, []);
    kids.get(node.parent).push(node);
  }
  for (const list of kids.values()) list.sort(childOrder);
  return kids;
}

// The target's own token goes first under its parent, then the accepted draft, then the rest by path
// score: once verified, the accepted path runs along the root's row.
function childOrder(a, b) {
  const rank = (n) => (n.status === "recovered" || n.status === "bonus" ? 0 : n.status === "accepted" ? 1 : 2);
  return rank(a) - rank(b) || (b.score ?? 0) - (a.score ?? 0);
}

function collapsible(node, growing, kids) {
  if (node.status === "pruned") return true;
  return growing && node.status === "kept" && node.expanded === false && !(kids.get(node.id)?.length);
}

function shownFolded(shown, growing, kids) {
  return shown.filter((c) => collapsible(c, growing, kids)).length;
}

function addHidden(hiddenByLayer, node) {
  const layer = hiddenByLayer.get(node.depth) ?? { count: 0, reasons: {} };
  layer.count += 1;
  const why = node.status === "pruned" ? node.reason ?? "pruned" : "not grown";
  layer.reasons[why] = (layer.reasons[why] ?? 0) + 1;
  hiddenByLayer.set(node.depth, layer);
}

function countReasons(nodes) {
  const reasons = {};
  for (const node of nodes) {
    const why = node.status === "pruned" ? node.reason ?? "pruned" : "not grown";
    reasons[why] = (reasons[why] ?? 0) + 1;
  }
  return reasons;
}

/** Column x per depth: each column as wide as its widest label. */
function columnsOf(placed) {
  const widest = [];
  for (const node of placed) widest[node.depth] = Math.max(widest[node.depth] ?? 0, nodeWidth(nodeLabel(node)));
  const x = [LAYOUT.left];
  const width = [];
  for (let d = 0; d < widest.length; d++) {
    width[d] = Math.max(widest[d] ?? 40, 48);
    x[d + 1] = x[d] + width[d] + LAYOUT.gap;
  }
  return { x, width };
}

function layerHeaders(step, columns, hiddenByLayer, openLayer) {
  const depths = new Set(step.layers.map((l) => l.depth));
  for (const depth of hiddenByLayer.keys()) depths.add(depth);
  for (let d = 1; d < columns.width.length; d++) depths.add(d);
  return [...depths].sort((a, b) => a - b).map((depth) => {
    const layer = step.layers.find((l) => l.depth === depth) ?? { depth, threshold: null, anchor: null };
    const hidden = hiddenByLayer.get(depth) ?? { count: 0, reasons: {} };
    const x = columns.x[depth] ?? columns.x[columns.x.length - 1];
    return { ...layer, x, w: columns.width[depth] ?? 64, hidden: hidden.count, reasons: hidden.reasons,
             open: openLayer(depth) };
  });
}

/** How many candidates of each layer the view would fold, for deciding whether to open it. */
export function collapsibleCount(step, depth) {
  const kids = childrenOf(step);
  let count = 0;
  for (const node of step.nodes.values()) if (node.depth === depth && collapsible(node, !step.tree, kids)) count += 1;
  return count;
}

/** The box around some nodes of a layout, for the camera. */
export function boundsOf(nodes) {
  if (!nodes.length) return null;
  const x0 = Math.min(...nodes.map((n) => n.x));
  const y0 = Math.min(...nodes.map((n) => n.y));
  const x1 = Math.max(...nodes.map((n) => n.x + n.w));
  const y1 = Math.max(...nodes.map((n) => n.y + n.h));
  return { x: x0, y: y0, w: x1 - x0, h: y1 - y0 };
}
