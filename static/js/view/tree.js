// Draws a laid-out tree (model/layout.js) as SVG. TreeView adds what a lecture needs around it: a
// camera that pans and zooms (mouse, wheel, keys) and glides to what the phase is about, a minimap
// for trees bigger than the box, the root pinned at the edge when it is panned out of view, and
// keyboard focus that moves between nodes with the arrow keys (the tree is one Tab stop).
// `renderTree` draws a tree at its natural size, for small panes.

import { describeNode } from "../model/events.js";
import { formatProbability } from "../model/format.js";
import { LAYOUT } from "../model/layout.js";
import { el, svgEl } from "./dom.js";

const REASON_WORDS = { below_threshold: "below the bar", budget: "past the budget", rerank: "dropped at rerank",
                       topk: "not in the top K", depth_limit: "depth limit", cost: "not worth its cost",
                       "not grown": "kept, not grown", threshold: "pruned" };

// ---------------------------------------------------------------- drawing

/** Draws `layout` into `group`, reusing the elements of nodes drawn before so moves glide; node ids begin with
 * `idPrefix` (one per tree on the page, so that ids stay unique). */
function drawInto(group, layout, { onChip, onLayer, idPrefix = "tree-node-" } = {}) {
  const previous = group.__nodes ?? new Map();
  const fresh = new Map();
  const headers = svgEl("g", { class: "layer-headers" });
  for (const layer of layout.layers) headers.append(layerHeader(layer, onLayer));
  const edges = svgEl("g", { class: "edges" });
  const previousEdges = group.__edges ?? new Map();
  const freshEdges = new Map();
  for (const edge of layout.edges) {
    const path = edgePath(edge, previousEdges.get(edge.to.id));
    freshEdges.set(edge.to.id, path);
    edges.append(path);
  }
  group.__edges = freshEdges;
  const nodes = svgEl("g", { class: "nodes" });
  for (const node of layout.nodes) {
    const element = previous.get(node.id) ?? svgEl("g", { class: "node entering" });
    if (previous.has(node.id)) element.classList.remove("entering");
    updateNode(element, node, idPrefix);
    fresh.set(node.id, element);
    nodes.append(element);
  }
  const chips = svgEl("g", { class: "chips" });
  for (const chip of layout.chips) chips.append(chipGroup(chip, onChip));
  group.replaceChildren(headers, edges, nodes, chips);
  group.__nodes = fresh;
  return fresh;
}

function updateNode(element, node, idPrefix) {
  const isRoot = node.status === "root";
  element.setAttribute("class", `node ${node.status}${element.classList.contains("entering") ? " entering" : ""}`);
  element.style.transform = `translate(${node.x}px, ${node.y}px)`; // CSSOM: the CSP refuses style attributes
  element.id = `${idPrefix}${node.id}`;
  element.setAttribute("role", "treeitem");
  element.setAttribute("aria-label", ariaLabel(node));
  element.setAttribute("data-node", node.id);
  element.setAttribute("data-depth", String(node.depth));
  if (isRoot) {
    element.removeAttribute("data-status");
    element.setAttribute("data-role", "root");
  } else {
    element.setAttribute("data-status", node.status);
    element.removeAttribute("data-role");
  }
  const rects = [svgEl("rect", { width: node.w, height: node.h, rx: 5, class: "box" })];
  // Recovered and bonus tokens are the target's own: a double outline says so without colour.
  if (node.status === "recovered" || node.status === "bonus") {
    rects.push(svgEl("rect", { x: 3, y: 3, width: node.w - 6, height: node.h - 6, rx: 3, class: "inner" }));
  }
  element.replaceChildren(...rects, svgEl("text", { x: LAYOUT.pad, y: node.h / 2, dy: "0.35em", class: "label" }, node.label));
  element.__node = node;
}

function ariaLabel(node) {
  if (node.status === "root") return `context, ending in ${JSON.stringify(node.text ?? "")}`;
  const p = node.p == null ? "" : `, target p ${formatProbability(node.p)}`;
  return `${JSON.stringify(node.text ?? "")}, depth ${node.depth}, ${node.status}${p}`;
}

/** An edge's curve; the element drawn for the same child before is reused, so the curve glides with its nodes. */
function edgePath(edge, reuse = null) {
  const x1 = edge.from.x + edge.from.w;
  const y1 = edge.from.y + edge.from.h / 2;
  const x2 = edge.to.x;
  const y2 = edge.to.y + edge.to.h / 2;
  const mid = (x1 + x2) / 2;
  const path = reuse ?? svgEl("path", { "data-to": edge.to.id });
  path.setAttribute("class", `edge ${edge.status}`);
  path.style.setProperty("d", `path("M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}")`);
  return path;
}

function layerHeader(layer, onLayer) {
  const group = svgEl("g", { class: `layer-header${layer.open ? " open" : ""}`, "data-depth": String(layer.depth) });
  group.append(svgEl("text", { x: layer.x, y: 16, class: "layer-title" }, `layer ${layer.depth}`));
  if (layer.threshold != null) {
    const bar = svgEl("text", { x: layer.x, y: 35, class: "layer-threshold" }, `≥ ${shortNumber(layer.threshold)}`);
    bar.append(svgEl("title", {}, layer.anchor != null
      ? `keeps path scores ≥ μ·m_${layer.depth} = ${formatProbability(layer.threshold)}, where m_${layer.depth} = ${formatProbability(layer.anchor)} is the layer's best path score`
      : `the layer's bar: ${formatProbability(layer.threshold)}`));
    group.append(bar);
  }
  if (layer.hidden > 0) {
    const chip = svgEl("g", { class: "layer-chip", role: "button", "data-depth": String(layer.depth),
                              style: `transform: translate(${layer.x}px, 46px)` });
    const label = chipLabel(layer);
    chip.append(svgEl("rect", { width: Math.max(48, textWidth(label) + 16), height: 22, rx: 11 }),
                svgEl("text", { x: 8, y: 11, dy: "0.35em" }, label),
                svgEl("title", {}, `${reasonList(layer.reasons)} — click to show them`));
    if (onLayer) chip.addEventListener("click", (event) => { event.stopPropagation(); onLayer(layer.depth); });
    group.append(chip);
  } else if (layer.open && onLayer) {
    const fold = svgEl("g", { class: "layer-chip open", role: "button", "data-depth": String(layer.depth),
                              style: `transform: translate(${layer.x}px, 46px)` });
    fold.append(svgEl("rect", { width: 64, height: 22, rx: 11 }), svgEl("text", { x: 8, y: 11, dy: "0.35em" }, "fold ◂"),
                svgEl("title", {}, "fold this layer's pruned candidates into a count"));
    if (onLayer) fold.addEventListener("click", (event) => { event.stopPropagation(); onLayer(layer.depth); });
    group.append(fold);
  }
  return group;
}

/** Two significant digits, short enough for a narrow column: 0.029, 0.0079, 2.6e-4. */
function shortNumber(value) {
  return value >= 0.001 ? String(Number(value.toPrecision(2))) : value.toExponential(1);
}

// Width of 15 px system-font text, roughly: enough to keep a chip inside its column.
function textWidth(text) {
  return Array.from(text).length * 7.8;
}

/** "+95 pruned ▸" where the column has room, else "+95 ▸" (the tooltip lists the reasons). */
function chipLabel(layer) {
  const word = layer.reasons.rerank === layer.hidden ? "dropped" : layer.reasons["not grown"] === layer.hidden ? "not grown" : "pruned";
  const room = layer.w + LAYOUT.gap - 22;
  const long = `+${layer.hidden} ${word} ▸`;
  return textWidth(long) <= room ? long : `+${layer.hidden} ▸`;
}

export function reasonList(reasons) {
  return Object.entries(reasons).map(([why, n]) => `${n} ${REASON_WORDS[why] ?? why}`).join(", ");
}

function chipGroup(chip, onChip) {
  const group = svgEl("g", { class: "chip", role: "button", "data-parent": chip.parent,
                             style: `transform: translate(${chip.x}px, ${chip.y + 2}px)` });
  group.append(svgEl("rect", { width: chip.w, height: chip.h, rx: chip.h / 2 }),
               svgEl("text", { x: LAYOUT.pad, y: chip.h / 2, dy: "0.35em" }, chip.label),
               svgEl("title", {}, `${reasonList(chip.reasons)} — click to show them all`));
  if (onChip) group.addEventListener("click", (event) => { event.stopPropagation(); onChip(chip.parent); });
  return group;
}

/** Draws a tree at its natural size into `svg` (compare panes, what-if); `tooltip` explains a node on hover. */
export function renderTree(svg, layout, tooltip, { idPrefix } = {}) {
  svg.setAttribute("width", layout.width);
  svg.setAttribute("height", layout.height);
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  let group = svg.querySelector(":scope > g.scene");
  if (!group) {
    group = svgEl("g", { class: "scene" });
    svg.replaceChildren(group);
  }
  const drawn = drawInto(group, layout, { idPrefix });
  if (tooltip) for (const [, element] of drawn) tooltip.attach(element, element.__node);
}

/** Forgets what was drawn, so the next tree (another step) fades in as a whole. */
export function resetTree(svg) {
  const group = svg.querySelector(":scope > g.scene, :scope g.camera");
  if (group) group.__nodes = new Map();
}

// ---------------------------------------------------------------- the lecture's tree view

const EASE_MS = 650;

/**
 * The tree in a fixed box. `render(layout, options)` draws and moves the camera:
 *   focus      { box, anchor: "start" | "end" } the part of the tree the phase is about, or null to stay
 *   minZoom    the least zoom at which labels are drawn (15 px labels: 14/15 on screen, 1.6 on a projector)
 *   homeZoom   the zoom the camera prefers
 * The box carries data-camera="moving" while the camera glides and "still" after.
 */
export class TreeView {
  constructor(viewport, { tooltip = null, onHover = () => {}, onLayer = () => {}, onChip = () => {} } = {}) {
    this.viewport = viewport;
    this.tooltip = tooltip;
    this.callbacks = { onHover, onLayer, onChip };
    this.svg = viewport.querySelector("svg.tree");
    this.camera = svgEl("g", { class: "camera" });
    this.svg.replaceChildren(this.camera);
    this.minimap = svgEl("svg", { class: "minimap", "aria-hidden": "true" });
    this.ghost = el("button", { type: "button", class: "root-ghost", hidden: "", title: "back to the root (0)" });
    viewport.append(this.minimap, this.ghost);
    this.view = { x: 0, y: 0, z: 1 };
    this.layout = null;
    this.options = { minZoom: 14 / 15, homeZoom: 1, maxZoom: 1.6 };
    this.active = null;
    viewport.dataset.camera = "still";
    this._listen();
  }

  render(layout, { focus = null, minZoom = this.options.minZoom, homeZoom = this.options.homeZoom,
                   maxZoom = this.options.maxZoom, instant = false } = {}) {
    const first = !this.layout;
    this.layout = layout;
    this.options = { minZoom, homeZoom, maxZoom };
    drawInto(this.camera, layout, { onChip: this.callbacks.onChip, onLayer: this.callbacks.onLayer });
    this._index = new Map(layout.nodes.map((n) => [n.id, n]));
    if (this.active && !this._index.has(this.active)) this.active = null;
    this._markActive();
    if (focus) this.focusOn(focus, { instant: instant || first });
    else this._apply();
  }

  /** Glides the camera to show `box` whole at a readable zoom, or as much of it as fits from `anchor`. */
  focusOn({ box, anchor = "start" }, { instant = false } = {}) {
    if (!box) return;
    const { width, height } = this._size();
    const margin = 16;
    const { minZoom, homeZoom, maxZoom } = this.options;
    const fit = Math.min((width - 2 * margin) / box.w, (height - 2 * margin) / box.h);
    const z = clamp(Math.min(fit, Math.max(homeZoom, minZoom)), minZoom, maxZoom);
    const visibleW = (width - 2 * margin) / z;
    const visibleH = (height - 2 * margin) / z;
    // Whole box if it fits; otherwise its start (the root side) or its end (the newest tokens).
    const x = box.w <= visibleW ? box.x - (visibleW - box.w) / 2 : anchor === "end" ? box.x + box.w - visibleW : box.x;
    const y = box.h <= visibleH ? box.y - Math.min((visibleH - box.h) / 2, box.y) : anchor === "end" ? box.y + box.h - visibleH : box.y;
    this.moveTo({ x: Math.max(x - margin / z, -margin / z), y: Math.max(y - margin / z, -margin / z), z }, { instant });
  }

  /** Camera target in layout units: the view's top-left corner and the zoom. */
  moveTo(target, { instant = false } = {}) {
    cancelAnimationFrame(this._frame);
    const reduced = window.matchMedia?.("(prefers-reduced-motion: reduce)").matches;
    if (instant || reduced) {
      this.view = target;
      this._apply();
      this.viewport.dataset.camera = "still";
      return;
    }
    const from = { ...this.view };
    const began = performance.now();
    this.viewport.dataset.camera = "moving";
    const frame = (now) => {
      const t = Math.min(1, (now - began) / EASE_MS);
      const e = t < 0.5 ? 2 * t * t : 1 - (-2 * t + 2) ** 2 / 2;
      this.view = { x: from.x + (target.x - from.x) * e, y: from.y + (target.y - from.y) * e, z: from.z + (target.z - from.z) * e };
      this._apply();
      if (t < 1) this._frame = requestAnimationFrame(frame);
      else this.viewport.dataset.camera = "still";
    };
    this._frame = requestAnimationFrame(frame);
  }

  zoomBy(factor, at = null) {
    const { width, height } = this._size();
    const point = at ?? { x: width / 2, y: height / 2 };
    const z = clamp(this.view.z * factor, 0.15, this.options.maxZoom * 1.5);
    const ux = this.view.x + point.x / this.view.z;
    const uy = this.view.y + point.y / this.view.z;
    this.moveTo({ x: ux - point.x / z, y: uy - point.y / z, z }, { instant: true });
  }

  panBy(dx, dy) {
    this.moveTo({ ...this.view, x: this.view.x + dx / this.view.z, y: this.view.y + dy / this.view.z }, { instant: true });
  }

  /** The whole tree in the box, whatever the zoom (labels hide below the readable zoom). */
  fitAll() {
    if (!this.layout) return;
    const { width, height } = this._size();
    const z = Math.min(width / this.layout.width, height / this.layout.height, this.options.homeZoom);
    this.moveTo({ x: 0, y: 0, z }, {});
  }

  home() {
    this.moveTo({ x: -12, y: 0, z: Math.max(this.options.homeZoom, this.options.minZoom) }, {});
  }

  /** Lights a node and its ancestors (the mask panel's hovered row does the same). */
  highlight(id) {
    for (const node of this.camera.querySelectorAll(".node.lit")) node.classList.remove("lit");
    for (const edge of this.camera.querySelectorAll(".edge.lit")) edge.classList.remove("lit");
    let current = id ? this._index?.get(id) : null;
    while (current) {
      document.getElementById(`tree-node-${current.id}`)?.classList.add("lit");
      this.camera.querySelector(`.edge[data-to="${CSS.escape(current.id)}"]`)?.classList.add("lit");
      current = current.parent ? this._index.get(current.parent) : null;
    }
  }

  /** The SVG of what the box shows now, for export. */
  visibleBox() {
    const { width, height } = this._size();
    return { x: this.view.x, y: this.view.y, w: width / this.view.z, h: height / this.view.z, width, height };
  }

  _size() {
    return { width: this.viewport.clientWidth || 800, height: this.viewport.clientHeight || 400 };
  }

  _apply() {
    const { x, y, z } = this.view;
    this.camera.setAttribute("transform", `translate(${-x * z},${-y * z}) scale(${z})`);
    // Below the readable zoom the tree shows its shape only; hover still explains each node.
    this.svg.classList.toggle("no-labels", z < this.options.minZoom - 1e-6);
    this.viewport.dataset.zoom = String(z);
    this._drawMinimap();
    this._placeGhost();
  }

  _drawMinimap() {
    const layout = this.layout;
    if (!layout) return;
    const { width, height } = this._size();
    const visible = { x: this.view.x, y: this.view.y, w: width / this.view.z, h: height / this.view.z };
    const needed = layout.width > visible.w + 1 || layout.height > visible.h + 1 || visible.x < -40 || visible.y < -40;
    this.minimap.toggleAttribute("hidden", !needed);
    if (!needed) return;
    const scale = Math.min(180 / layout.width, 120 / layout.height);
    const w = Math.max(40, layout.width * scale);
    const h = Math.max(30, layout.height * scale);
    this.minimap.setAttribute("width", w);
    this.minimap.setAttribute("height", h);
    this.minimap.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
    this.minimap.__scale = scale;
    if (this.minimap.__layout !== layout) {
      this.minimap.replaceChildren(...layout.nodes.map((n) =>
        svgEl("rect", { x: n.x, y: n.y, width: n.w, height: n.h, class: `mini ${n.status}` })));
      this.minimap.append(svgEl("rect", { class: "window" }));
      this.minimap.__layout = layout;
    }
    const frame = this.minimap.querySelector(".window");
    frame.setAttribute("x", visible.x);
    frame.setAttribute("y", visible.y);
    frame.setAttribute("width", visible.w);
    frame.setAttribute("height", visible.h);
    frame.setAttribute("stroke-width", 2 / scale);
  }

  _placeGhost() {
    const root = this._index?.get("n0");
    if (!root) {
      this.ghost.hidden = true;
      return;
    }
    const { width, height } = this._size();
    const sx = (root.x - this.view.x) * this.view.z;
    const sy = (root.y - this.view.y) * this.view.z;
    const out = sx + root.w * this.view.z < 0 || sy + root.h * this.view.z < 0 || sx > width || sy > height;
    this.ghost.hidden = !out;
    this.ghost.textContent = `${root.label} ◂ root`;
  }

  _markActive() {
    for (const node of this.camera.querySelectorAll(".node.active")) node.classList.remove("active");
    if (this.active) {
      document.getElementById(`tree-node-${this.active}`)?.classList.add("active");
      this.viewport.setAttribute("aria-activedescendant", `tree-node-${this.active}`);
    } else {
      this.viewport.removeAttribute("aria-activedescendant");
    }
  }

  /** Arrow keys inside the tree: right to the first child, left to the parent, up and down among siblings. */
  _moveActive(key) {
    const layout = this.layout;
    if (!layout?.nodes.length) return;
    const current = this._index.get(this.active) ?? this._index.get("n0");
    let next = current;
    if (this.active == null) next = current;
    else if (key === "ArrowRight") next = layout.nodes.find((n) => n.parent === current.id) ?? current;
    else if (key === "ArrowLeft") next = this._index.get(current.parent) ?? current;
    else {
      const siblings = layout.nodes.filter((n) => n.parent === current.parent).sort((a, b) => a.y - b.y);
      const i = siblings.indexOf(current) + (key === "ArrowDown" ? 1 : -1);
      next = siblings[clamp(i, 0, siblings.length - 1)] ?? current;
    }
    this.active = next.id;
    this._markActive();
    this.callbacks.onHover(next.id);
    this.highlight(next.id);
    this._keepInView(next);
    const element = document.getElementById(`tree-node-${next.id}`);
    if (this.tooltip && element) {
      const box = element.getBoundingClientRect();
      this.tooltip.show(next, { clientX: box.right, clientY: box.top });
    }
  }

  _keepInView(node) {
    const { width, height } = this._size();
    const sx = (node.x - this.view.x) * this.view.z;
    const sy = (node.y - this.view.y) * this.view.z;
    if (sx >= 0 && sy >= 0 && sx + node.w * this.view.z <= width && sy + node.h * this.view.z <= height) return;
    this.focusOn({ box: { x: node.x, y: node.y, w: node.w, h: node.h } });
  }

  _listen() {
    const viewport = this.viewport;
    let drag = null;
    viewport.addEventListener("pointerdown", (event) => {
      if (event.button !== 0 || event.target.closest(".node, .chip, .layer-chip, .minimap, .root-ghost")) return;
      drag = { x: event.clientX, y: event.clientY, id: event.pointerId };
      viewport.setPointerCapture(event.pointerId);
      viewport.classList.add("dragging");
    });
    viewport.addEventListener("pointermove", (event) => {
      if (!drag || drag.id !== event.pointerId) return;
      this.panBy(drag.x - event.clientX, drag.y - event.clientY);
      drag.x = event.clientX;
      drag.y = event.clientY;
    });
    const end = () => {
      drag = null;
      viewport.classList.remove("dragging");
    };
    viewport.addEventListener("pointerup", end);
    viewport.addEventListener("pointercancel", end);
    viewport.addEventListener("wheel", (event) => {
      event.preventDefault();
      const rect = viewport.getBoundingClientRect();
      if (event.ctrlKey || event.metaKey) {
        this.zoomBy(Math.exp(-event.deltaY / 300), { x: event.clientX - rect.left, y: event.clientY - rect.top });
      } else {
        this.panBy(event.shiftKey ? event.deltaY : event.deltaX, event.shiftKey ? 0 : event.deltaY);
      }
    }, { passive: false });
    this.minimap.addEventListener("pointerdown", (event) => {
      const rect = this.minimap.getBoundingClientRect();
      const scale = this.minimap.__scale ?? 1;
      const { width, height } = this._size();
      const ux = (event.clientX - rect.left) / scale;
      const uy = (event.clientY - rect.top) / scale;
      this.moveTo({ x: ux - width / this.view.z / 2, y: uy - height / this.view.z / 2, z: this.view.z }, {});
    });
    this.ghost.addEventListener("click", () => this.home());
    viewport.addEventListener("keydown", (event) => this._onKey(event));
    viewport.addEventListener("focus", () => {
      if (!this.active && this._index?.has("n0")) {
        this.active = "n0";
        this._markActive();
      }
    });
    viewport.addEventListener("blur", () => this.tooltip?.hide());
    const nodeOf = (event) => event.target.closest?.(".node")?.__node ?? null;
    this.svg.addEventListener("pointerover", (event) => {
      const node = nodeOf(event);
      if (!node) return;
      this.highlight(node.id);
      this.callbacks.onHover(node.id);
      this.tooltip?.show(node, event);
    });
    this.svg.addEventListener("pointerout", (event) => {
      if (!nodeOf(event)) return;
      this.highlight(this.active);
      this.callbacks.onHover(this.active);
      this.tooltip?.hide();
    });
    this.svg.addEventListener("click", (event) => {
      const node = nodeOf(event);
      if (!node) return;
      event.stopPropagation();
      this.active = node.id;
      this._markActive();
      this.tooltip?.pin(node, event);
    });
  }

  _onKey(event) {
    const actions = {
      ArrowRight: () => this._moveActive("ArrowRight"),
      ArrowLeft: () => this._moveActive("ArrowLeft"),
      ArrowUp: () => this._moveActive("ArrowUp"),
      ArrowDown: () => this._moveActive("ArrowDown"),
      Enter: () => this._openActive(),
      w: () => this.panBy(0, -80), a: () => this.panBy(-80, 0), s: () => this.panBy(0, 80), d: () => this.panBy(80, 0),
    };
    // Shift+arrows still move the player by steps; plain arrows belong to the tree while it has focus.
    if (event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
    const action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    event.stopPropagation();
    action();
  }

  _openActive() {
    const node = this._index?.get(this.active);
    if (node?.hidden) this.callbacks.onChip(node.id);
  }
}

function clamp(value, low, high) {
  return Math.max(low, Math.min(high, value));
}

// ---------------------------------------------------------------- tooltip

/** Hover explains, click pins (and a second click or Escape unpins). */
export function createTooltip(box) {
  let pinned = null;
  const show = (node, event) => {
    if (pinned && pinned !== node.id) return;
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
  const pin = (node, event) => {
    pinned = pinned === node.id ? null : node.id;
    box.classList.toggle("pinned", Boolean(pinned));
    if (pinned) show(node, event);
    else box.hidden = true;
  };
  return {
    show,
    hide,
    pin,
    attach(group, node) {
      if (group.__tooltip) return; // a redrawn node keeps its element, and its listeners
      group.__tooltip = true;
      group.addEventListener("mouseenter", (event) => show(group.__node ?? node, event));
      group.addEventListener("mouseleave", hide);
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        pin(group.__node ?? node, event);
      });
    },
    unpin() {
      pinned = null;
      box.classList.remove("pinned");
      box.hidden = true;
    },
  };
}
