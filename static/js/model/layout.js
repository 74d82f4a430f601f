// Where each node of a step's tree goes on screen. No DOM.

export const LAYOUT = { column: 96, row: 24, nodeWidth: 80, nodeHeight: 18, top: 30, left: 8 };

/**
 * Places a step's nodes: depth left to right, siblings top to bottom by score,
 * a parent centred on its children. Pruned candidates beyond `maxPruned` per
 * parent are counted on the parent (`hiddenPruned`) instead of drawn.
 * Example: root -> a (kept), b (pruned) gives a at row 0, b at row 1, root at row 0.5.
 */
export function layoutTree(step, { maxPruned = 3 } = {}) {
  const children = childrenByParent(step, maxPruned);
  const placed = new Map();
  let row = 0;
  const place = (id) => {
    const kids = children.visible.get(id) ?? [];
    kids.forEach(place);
    const y = kids.length ? (placed.get(kids[0]).row + placed.get(kids[kids.length - 1]).row) / 2 : row++;
    placed.set(id, { row: y });
  };
  place("n0");
  const nodes = [...placed.keys()].map((id) => {
    const node = step.nodes.get(id);
    return { ...node, hiddenPruned: children.hidden.get(id) ?? 0,
             x: LAYOUT.left + node.depth * LAYOUT.column, y: LAYOUT.top + placed.get(id).row * LAYOUT.row };
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges = nodes.filter((n) => n.parent && byId.has(n.parent))
    .map((n) => ({ from: byId.get(n.parent), to: n, status: n.status }));
  const maxDepth = nodes.reduce((m, n) => Math.max(m, n.depth), 0);
  return {
    nodes, edges, layers: step.layers,
    width: LAYOUT.left * 2 + maxDepth * LAYOUT.column + LAYOUT.nodeWidth,
    height: LAYOUT.top + Math.max(row, 1) * LAYOUT.row,
  };
}

function childrenByParent(step, maxPruned) {
  const all = new Map();
  for (const node of step.nodes.values()) {
    if (node.parent == null) continue;
    if (!all.has(node.parent)) all.set(node.parent, []);
    all.get(node.parent).push(node);
  }
  const visible = new Map();
  const hidden = new Map();
  for (const [parent, kids] of all) {
    kids.sort(childOrder);
    const pruned = kids.filter((k) => k.status === "pruned" && k.reason !== "rerank");
    const shownPruned = new Set(pruned.slice(0, maxPruned));
    const shown = kids.filter((k) => !pruned.includes(k) || shownPruned.has(k));
    visible.set(parent, shown.map((k) => k.id));
    if (pruned.length > shownPruned.size) hidden.set(parent, pruned.length - shownPruned.size);
  }
  return { visible, hidden };
}

// The emitted token goes first under its parent, then drafts by path score.
function childOrder(a, b) {
  const rank = (n) => (n.status === "recovered" || n.status === "bonus" ? 0 : 1);
  return rank(a) - rank(b) || (b.score ?? 0) - (a.score ?? 0);
}
