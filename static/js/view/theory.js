// The theory panels, drawn from the step on screen: the tree-attention mask with position ids, the
// KV cache strip, the acceptance walk's numbers (p, q, min(1, p/q), u, the residual) and the formulas
// with live numbers. Numbers come from model/theory.js; this module only draws. SVG throughout, so
// the export can take the panel as it is.

import { sig, quote } from "../model/narration.js";
import { ancestorsOf, attentionMask, positionIds } from "../model/theory.js";
import { tokenLabel, truncate } from "../model/format.js";
import { el, svgEl } from "./dom.js";

/** Draws a panel's SVG drawings `scale` times their size (a projector wants ~1.4), keeping their layout. */
export function scaleDrawings(panel, scale) {
  for (const svg of panel.querySelectorAll(":scope > svg")) {
    const width = Number(svg.getAttribute("width"));
    const height = Number(svg.getAttribute("height"));
    if (!svg.hasAttribute("viewBox")) svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", String(width * scale));
    svg.setAttribute("height", String(height * scale));
  }
}

// ---------------------------------------------------------------- attention mask

/** Which prefix columns to draw: all when few, else the first two and the last two (the rest are all 1 too). */
export function prefixColumns(prefixLen) {
  if (prefixLen <= 8) return [...Array(prefixLen).keys()];
  return [0, 1, null, prefixLen - 2, prefixLen - 1];
}

/**
 * The mask of the verified tree: one row per node (root first), a column per prefix token (some
 * elided) and per node. Cells carry data-row, data-col (the column in the full [T, P + T] matrix)
 * and data-allowed; the hovered node's row and its ancestors' cells are lit.
 */
export function renderMask(box, tree, prefixLen, { width = 520, height = 420, hovered = null, onHover = () => {},
                                                  labelAll = false } = {}) {
  const mask = attentionMask(tree.parent, prefixLen);
  const positions = positionIds(tree.depth, prefixLen);
  const T = tree.parent.length;
  const shownPrefix = prefixColumns(prefixLen);
  const columns = [...shownPrefix.map((j) => (j == null ? null : j)), ...tree.parent.map((_, i) => prefixLen + i)];
  // A projector labels every row and prints every position, and the panel scrolls instead (labelAll).
  const labelled = labelAll || T <= 28;
  const gutter = labelled ? 120 : 8;
  const right = 80;
  // Square cells that fit the panel; labelAll keeps rows tall enough for their labels (cells turn into columns).
  const cell = Math.max(3, Math.min(26, Math.floor(Math.min((width - gutter - right) / columns.length, (height - 56) / T))));
  const rowH = labelAll ? Math.max(cell, 16) : cell;
  const svg = svgEl("svg", { class: "mask", role: "img", width: Math.max(gutter + columns.length * cell + right, 420), height: 56 + T * rowH,
                             "aria-label": `tree-attention mask: ${T} nodes × ${prefixLen} prefix + ${T} tree columns` });
  const prefixWidth = shownPrefix.length * cell;
  const treeWidth = T * cell;
  // Column groups: a bar over the prefix columns and one over the tree's, named on the line above.
  svg.append(svgEl("text", { x: gutter, y: 16, class: "mask-head" },
                   `columns: prefix ${prefixLen}${prefixLen > shownPrefix.length ? " (4 shown)" : ""} · tree ${T}`),
             svgEl("rect", { x: gutter, y: 28, width: Math.max(prefixWidth - 2, 1), height: 8, class: "mask-group prefix" }),
             svgEl("rect", { x: gutter + prefixWidth, y: 28, width: treeWidth - 1, height: 8, class: "mask-group tree" }),
             svgEl("text", { x: gutter + columns.length * cell + 6, y: 40, class: "mask-head" }, "position"));
  const lit = hovered == null ? new Set() : new Set(ancestorsOf(tree.parent, hovered));
  const grid = svgEl("g", { transform: `translate(${gutter},48)` });
  for (let i = 0; i < T; i++) {
    const row = svgEl("g", { class: `mask-row${i === hovered ? " hovered" : ""}`, "data-row": String(i) });
    columns.forEach((col, k) => {
      if (col == null) {
        row.append(svgEl("text", { x: k * cell + cell / 2, y: i * rowH + rowH / 2, dy: "0.35em", class: "mask-gap" }, "⋯"));
        return;
      }
      const allowed = mask[i][col];
      const isTree = col >= prefixLen;
      const litCell = allowed && i === hovered && (!isTree || lit.has(col - prefixLen));
      row.append(svgEl("rect", { x: k * cell, y: i * rowH, width: cell - (cell > 5 ? 1 : 0), height: rowH - (rowH > 5 ? 1 : 0),
                                 class: `cell${allowed ? " allowed" : ""}${isTree ? " tree" : ""}${litCell ? " lit" : ""}`,
                                 "data-row": String(i), "data-col": String(col), "data-allowed": String(allowed) }));
    });
    if (labelled) {
      row.append(svgEl("text", { x: -8, y: i * rowH + rowH / 2, dy: "0.35em", "text-anchor": "end", class: "mask-label" },
                       `${i === 0 ? "root " : ""}${truncate(tokenLabel(tree.text[i]), 8)}`));
    }
    if (rowH >= 14) {
      row.append(svgEl("text", { x: columns.length * cell + 6, y: i * rowH + rowH / 2, dy: "0.35em", class: "mask-pos",
                                 "data-position": String(positions[i]) }, String(positions[i])));
    } else {
      // Too small to print: the depth as a bar, longer for deeper nodes.
      row.append(svgEl("rect", { x: columns.length * cell + 6, y: i * rowH, width: 4 + tree.depth[i] * 6, height: Math.max(1, rowH - 1),
                                 class: "mask-depth", "data-position": String(positions[i]) }));
    }
    row.addEventListener("pointerenter", () => onHover(i));
    grid.append(row);
  }
  svg.append(grid);
  const note = el("p", { class: "panel-note" });
  note.textContent = hovered == null
    ? `Row i is node i of the tree. A node sees the whole prefix (${prefixLen} tokens), its ancestors and itself; ` +
      `its position id is ${prefixLen} + depth (${Math.min(...positions)} … ${Math.max(...positions)}), so siblings share one. Hover a node or a row.`
    : `${quote(tree.text[hovered])} at depth ${tree.depth[hovered]} (position ${positions[hovered]}) sees the prefix and ` +
      `${[...lit].reverse().map((j) => quote(tree.text[j])).join(" → ")}.`;
  box.replaceChildren(svg, note);
  box.dataset.rows = String(T);
  box.dataset.prefix = String(prefixLen);
}

// ---------------------------------------------------------------- KV cache

/**
 * The cache as a strip: the prefix, then one row per tree node as verify wrote them, and below it
 * the cache after the commit (prefix, root, accepted path). While the walk runs, rows are marked as
 * it accepts them (`accepted`: tree indices so far); in the commit phase the kept rows slide left
 * into place and the dropped ones fall away.
 */
export function renderKv(box, cache, { committed = false, accepted = new Set([0]), width = 520 } = {}) {
  const T = cache.rows.length;
  const prefixW = 110;
  const cell = Math.max(4, Math.min(28, Math.floor((width - prefixW - 24) / Math.max(T, 1))));
  // At least as wide as its longest title ("after commit: N rows (M dropped)"), however few the rows.
  const svg = svgEl("svg", { class: "kv", role: "img", width: Math.max(prefixW + T * cell + 20, 330), height: 150,
                             "aria-label": `KV cache: ${cache.prefix} prefix rows, ${T} tree rows, ${cache.kept} kept` });
  const strip = (y, title) => {
    svg.append(svgEl("text", { x: 0, y: y - 8, class: "kv-title" }, title));
    svg.append(svgEl("rect", { x: 0, y, width: prefixW - 6, height: 28, class: "kv-prefix" }),
               svgEl("text", { x: 8, y: y + 14, dy: "0.35em", class: "kv-prefix-label" }, `prefix ${cache.prefix}`));
  };
  strip(26, `after verify: ${cache.prefix} + ${T} rows`);
  strip(102, committed ? `after commit: ${cache.after} rows (${cache.dropped} dropped)` : "after commit: the walk decides");
  let keptIndex = 0;
  for (const row of cache.rows) {
    const x = prefixW + row.post * cell;
    const fate = row.post === 0 ? "root" : committed ? row.fate : accepted.has(row.post) ? "kept" : "written";
    svg.append(svgEl("rect", { x, y: 26, width: cell - 1, height: 28, class: `kv-row ${fate}`, "data-post": String(row.post) }));
    if (cell >= 14 && committed && fate === "dropped") {
      svg.append(svgEl("text", { x: x + cell / 2, y: 40, dy: "0.35em", "text-anchor": "middle", class: "kv-mark" }, "✗"));
    }
    if (!committed || row.fate !== "kept") continue;
    const target = prefixW + keptIndex * cell;
    keptIndex += 1;
    // Starts where verify wrote the row and slides to its place after the prefix.
    svg.append(svgEl("rect", { x: target, y: 102, width: cell - 1, height: 28, class: `kv-row ${fate} moved`,
                               style: `--from: ${x - target}px` }));
  }
  svg.classList.toggle("committed", committed);
  const note = el("p", { class: "panel-note" }, committed
    ? `The commit keeps the root and the ${cache.kept - 1} accepted rows (✓) and drops ${cache.dropped} (✗): the cache ` +
      "now reads exactly as if plain decoding had produced those tokens one by one."
    : `Verify appended a key and value row for each of the ${T} tree tokens, each at its position prefix + depth. ` +
      "The walk marks the rows it accepts; the commit keeps those and drops the rest.");
  box.replaceChildren(svg, note);
  box.dataset.before = String(cache.prefix + T);
  box.dataset.after = String(cache.after);
  box.dataset.committed = String(committed);
}

// ---------------------------------------------------------------- sampling

/**
 * The walk at one node: the target's p and the draft's q over the top tokens as paired bars; each
 * child tried with its rule, min(1, p/q), the uniform draw u and the outcome; on rejection of all,
 * the residual norm(max(0, p − q)) and the token drawn from it.
 */
export function renderSampling(box, walk, { nodeText, temperature, textOf, plain = false }) {
  if (!walk) {
    box.replaceChildren(el("p", { class: "panel-note" },
      temperature > 0 ? "Step to an accept phase: this panel shows the target's p and the draft's q at each node the walk visits, the draw u and the outcome."
        : "At temperature 0 the walk follows the target's argmax: a child is accepted when it is the target's top token. Step to an accept phase to see it."));
    delete box.dataset.node;
    return;
  }
  const parts = [el("h4", {}, `at ${quote(nodeText)}`)];
  if (walk.top) parts.push(bars("target p and draft q", walk.top, { pq: true }));
  if (walk.checks.length) parts.push(checksTable(walk.checks, textOf));
  else if (walk.ended) parts.push(el("p", { class: "panel-note" }, "The text ends at this node: nothing after it is emitted, and no token is drawn."));
  else parts.push(el("p", { class: "panel-note" }, "No drafted child here: the path ends at this node."));
  if (walk.residual) parts.push(bars("residual norm(max(0, p − q))", walk.residual.map((t) => ({ ...t, q: null })), { residual: true }));
  if (walk.emitted) {
    const drawn = el("p", { class: `drawn ${walk.emitted.kind}`, "data-testid": "drawn-token", "data-token": String(walk.emitted.token) },
                     `${drawnName(walk.emitted, plain)}: ${quote(walk.emitted.text)} ` +
                     `(target p = ${sig(walk.emitted.p, 3)}${residualP(walk)}) — ` +
                     `${walk.residual ? "drawn from the residual" : temperature > 0 ? "drawn from p" : "the target's argmax"}`);
    parts.push(drawn);
  }
  if (walk.partial) parts.push(el("p", { class: "panel-note" }, "This trace predates the walk's numbers (schema 1): p and q of the tried children only."));
  box.replaceChildren(...parts);
  box.dataset.node = String(walk.node);
}

// Plain decoding's token is the target's own choice, not a bonus after an accepted path.
function drawnName(emitted, plain) {
  if (plain) return "the target's token";
  return emitted.kind === "bonus" ? "★ bonus" : "↺ recovered";
}

function residualP(walk) {
  const left = walk.residual?.find((t) => t.token === walk.emitted.token);
  return left ? `, ${sig(left.p, 3)} in the residual` : "";
}

function bars(title, tokens, { pq = false, residual = false } = {}) {
  const width = 420;
  const rowH = pq ? 34 : 22;
  const labelW = 110;
  const svg = svgEl("svg", { class: `bars${residual ? " residual" : ""}`, width, height: 26 + tokens.length * rowH, role: "img",
                             "aria-label": title });
  svg.append(svgEl("text", { x: 0, y: 16, class: "bars-title" }, title));
  const scale = (width - labelW - 70) / Math.max(...tokens.flatMap((t) => [t.p ?? 0, t.q ?? 0]), 1e-9);
  tokens.forEach((t, i) => {
    const y = 26 + i * rowH;
    const row = svgEl("g", { class: "bar-row", "data-token": String(t.token), "data-p": String(t.p), "data-q": t.q == null ? "" : String(t.q) });
    row.append(svgEl("text", { x: labelW - 8, y: y + (pq ? 14 : 10), dy: "0.35em", "text-anchor": "end", class: "bar-label" },
                     truncate(tokenLabel(t.text), 10)));
    row.append(svgEl("rect", { x: labelW, y, width: Math.max(1, (t.p ?? 0) * scale), height: pq ? 14 : 18, class: residual ? "bar residual" : "bar p" }),
               svgEl("text", { x: labelW + (t.p ?? 0) * scale + 6, y: y + (pq ? 7 : 9), dy: "0.35em", class: "bar-value" }, `${residual ? "" : "p "}${sig(t.p, 3)}`));
    if (pq) {
      row.append(svgEl("rect", { x: labelW, y: y + 16, width: Math.max(1, (t.q ?? 0) * scale), height: 14, class: "bar q" }),
                 svgEl("text", { x: labelW + (t.q ?? 0) * scale + 6, y: y + 23, dy: "0.35em", class: "bar-value" }, `q ${t.q == null ? "–" : sig(t.q, 3)}`));
    }
    svg.append(row);
  });
  return svg;
}

function checksTable(checks, textOf) {
  const table = el("table", { class: "checks" });
  const head = el("tr");
  for (const h of ["child", "rule", "p", "q", "accept if u <", "u", ""]) head.append(el("th", {}, h));
  table.append(head);
  for (const check of checks) {
    const tr = el("tr", { class: check.accepted ? "accepted" : "rejected", "data-u": check.u == null ? "" : String(check.u),
                          "data-ratio": check.ratio == null ? "" : String(check.ratio), "data-child": String(check.child) });
    const rule = check.rule === "sampled" ? "min(1, p/q)" : check.rule === "deterministic" ? "p" : check.rule === "greedy" ? "argmax" : "–";
    for (const value of [quote(textOf(check)), rule, sig(check.p, 3), check.q == null ? "–" : sig(check.q, 3),
                         check.ratio == null ? "–" : sig(check.ratio, 3), check.u == null ? "–" : sig(check.u, 3),
                         check.accepted ? "✓ accepted" : "✗ rejected"]) {
      tr.append(el("td", {}, value));
    }
    table.append(tr);
  }
  return table;
}

// ---------------------------------------------------------------- formulas

/** The formulas with this run's numbers; each value also sits in a data attribute for tests. `drafts`: the run's policy drafts. */
export function renderFormulas(box, f, { drafts = true } = {}) {
  const rows = [];
  const line = (name, formula, value, attrs = {}, note = "") => {
    const row = el("div", { class: "formula", ...attrs });
    row.append(el("span", { class: "formula-name" }, name), el("span", { class: "formula-body" }, formula),
               el("span", { class: "formula-value" }, value));
    if (note) row.append(el("small", { class: "formula-note" }, note));
    rows.push(row);
  };
  line("α", "accepted ÷ drafted positions tried", sig(f.alpha, 3), { "data-alpha": String(f.alpha ?? "") },
       "each step tries its path's tokens until the first rejection");
  if (f.gamma != null) {
    const expr = f.alpha == null ? "–" : `(1 − ${sig(f.alpha, 3)}^${f.gamma + 1}) / (1 − ${sig(f.alpha, 3)})`;
    line("E[τ]", `Leviathan: (1 − α^(γ+1)) / (1 − α) = ${expr}`, `${sig(f.leviathan, 3)} vs τ ${sig(f.tau, 3)} measured`,
         { "data-leviathan": String(f.leviathan ?? ""), "data-tau": String(f.tau ?? "") }, `γ = ${f.gamma}; α assumed the same at every position`);
  } else {
    line("τ", "tokens per step (accepted + 1)", sig(f.tau, 3), { "data-tau": String(f.tau ?? "") },
         !drafts ? "plain decoding: always 1" : "a tree offers alternatives at each depth, so τ can beat a chain's (1 − α^(γ+1)) / (1 − α)");
  }
  line("δ, c", "draft forwards per step; draft ÷ verify forward time", `${sig(f.delta, 3)}, ${sig(f.c, 3)}`);
  const measured = f.measured != null ? ` vs ${sig(f.measured, 3)}× measured` : "";
  line("R", `τ / (1 + c·δ) = ${sig(f.tau, 3)} / (1 + ${sig(f.c, 3)} × ${sig(f.delta, 3)})`,
       f.predicted == null ? "–" : `${sig(f.predicted, 3)}× if verify cost 1${measured}`,
       { "data-predicted": String(f.predicted ?? ""), "data-measured": String(f.measured ?? "") },
       f.steps ? `τ, δ, c over ${f.steps === 1 ? "the first step" : `the ${f.steps} steps so far`}` +
         (f.measured == null ? "; measured speedup: replay a comparison trace or run ar with the same setup"
                             : "; measured: the whole run's tokens/s over plain decoding's, same setup")
         : "τ, δ and c are known once the first step has been verified");
  verifyLine(line, f);
  breakEvenLine(line, f);
  ownTimesLine(line, f.own, f.measured);
  box.replaceChildren(...rows);
}

function verifyLine(line, f) {
  if (f.stepVerifyCost || f.runVerifyCost) {
    const cost = f.stepVerifyCost ?? f.runVerifyCost;
    const source = cost.source === "measured" ? "measured: verify time over plain decoding's one-token forward"
      : `from the engine's ${cost.source}`;
    const run = f.runVerifyCost ? `the run's trees so far: ${sig(f.runVerifyCost.ratio, 3)} on average` : "";
    const tokens = f.treeTokens === 1 ? "1 token" : `${f.treeTokens} tokens`;
    const body = f.stepVerifyCost ? `this step's tree (${tokens}) costs ${sig(f.stepVerifyCost.ratio, 3)} one-token forwards${run ? `; ${run}` : ""}`
      : `${run}; this step's tree is still being drafted`;
    line("verify", body, f.predictedWithCost != null ? `R = τ / (v + c·δ) = ${sig(f.predictedWithCost, 3)}×` : "",
         { "data-verify-cost": String(cost.ratio), "data-verify-source": cost.source },
         `${source}. R above assumes v = 1: true where the device has compute to spare (a GPU), not on a laptop CPU, ` +
         "where every extra token in the tree costs time — so a 60-node tree that accepts 3 tokens can lose to plain decoding there.");
  } else if (!f.treeFinal && !f.steps) {
    line("verify", "cost of the tree vs a one-token forward", "…", {}, "known once this step's tree is final");
  } else {
    line("verify", "cost of the tree vs a one-token forward", "–", {},
         "needs a cost table in the run, or a plain decoding run of the same setup (a comparison trace has one)");
  }
}

/** The τ the run's trees must beat on this device, in words: why a tree pays here or does not. */
function breakEvenLine(line, f) {
  if (f.breakEven == null || !f.runVerifyCost) return;
  const pays = f.tau != null && f.tau > f.breakEven;
  const verdict = f.tau == null ? "" : pays ? `τ ${sig(f.tau, 3)}: it pays` : `τ ${sig(f.tau, 3)}: it does not pay`;
  line("pays if", `τ > v + c·δ = ${sig(f.runVerifyCost.ratio, 3)} + ${sig(f.c ?? 0, 3)} × ${sig(f.delta, 3)} = ${sig(f.breakEven, 3)}`,
       verdict, { "data-break-even": String(f.breakEven), "data-pays": String(pays) },
       `however good the drafts, trees that cost ${sig(f.runVerifyCost.ratio, 3)} one-token forwards to verify ` +
       `must accept more than ${sig(f.breakEven, 3)} tokens a step to beat plain decoding where this run ran; ` +
       (pays ? "these do." : "these accept fewer, so a smaller tree, or a device where a wide forward costs " +
        "about what one token costs (a GPU), is what would pay."));
}

/** R from the run's own measured times: its verify, draft forwards and time outside the forwards per step,
 * over plain decoding's step (its forward and its own time outside). */
function ownTimesLine(line, own, measured) {
  if (!own?.steps) return;
  if (own.R == null) {
    line("R, timed", "τ / (v + δ·c + o)", "–", { "data-own-r": "" },
         "needs verify(1), one target forward of one token: a plain decoding run of the same setup or a measured cost table");
    return;
  }
  const c = own.c == null ? "0" : sig(own.c, 3);
  line("R, timed", `τ / (v + δ·c + o) = ${sig(own.tau, 3)} / (${sig(own.verifyRatio, 3)} + ${sig(own.delta, 3)} × ${c} + ${sig(own.o, 3)})`,
       `${sig(own.R, 3)}×${measured != null ? ` vs ${sig(measured, 3)}× measured` : ""}`,
       { "data-own-r": String(own.R), "data-own-verify-ratio": String(own.verifyRatio), "data-testid": "own-times-r" },
       `this run's own times per step, over plain decoding's step of ${sig(own.plainStepMs, 3)} ms ` +
       `(${own.oneToken.source}): v, the verify of ${sig(own.verifyMs, 3)} ms; c, one draft forward of ` +
       `${own.draftForwardMs == null ? "–" : `${sig(own.draftForwardMs, 3)} ms`}; o, the ${sig(own.outsideMs, 3)} ms ` +
       "outside model forwards (the policy's drafting work, acceptance, events: the time split). The measured " +
       "speedup also holds the prefill, the same for both runs");
}

