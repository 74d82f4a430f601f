// Tree layout: depth left to right, siblings top to bottom, the root at the top left, folded counts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { foldEvents } from "../../static/js/model/events.js";
import { LAYOUT, boundsOf, collapsibleCount, layoutTree, nodeLabel } from "../../static/js/model/layout.js";
import { foldPhase, phasesOf } from "../../static/js/model/phases.js";
import { candidate, talonRun } from "./fixtures.mjs";

const stepOne = () => foldEvents(talonRun.slice(0, 7)).steps[0];
const byText = (layout) => new Map(layout.nodes.map((n) => [n.text, n]));

test("depth_runs_left_to_right_and_a_parent_sits_on_its_first_childs_row", () => {
  const layout = layoutTree(stepOne());
  const at = byText(layout);
  assert.ok(at.get("a").x > at.get("x").x && at.get("d").x > at.get("a").x);
  assert.equal(at.get("x").y, LAYOUT.header, "the root is at the top");
  assert.equal(at.get("g").y, at.get("x").y, "the recovered token, then the accepted path, run along the root's row");
  assert.equal(at.get("a").y, at.get("x").y);
  assert.ok(at.get(" b").y > at.get("d").y, "the rejected sibling comes below the accepted one's subtree");
  assert.equal(at.get("a").x, at.get(" b").x, "one column per depth");
  assert.equal(layout.edges.length, layout.nodes.length - 1);
});

test("deep_narrow_is_wide_and_short_while_shallow_wide_is_narrow_and_tall", () => {
  const chain = { step: 1, layers: [], tree: [], nodes: new Map([["n0", { id: "n0", parent: null, depth: 0, status: "root", text: "r" }]]) };
  const comb = structuredClone(chain);
  for (let i = 1; i <= 12; i++) {
    chain.nodes.set(`n${i}`, { id: `n${i}`, parent: `n${i - 1}`, depth: i, status: "kept", text: "t", score: 1 });
    comb.nodes.set(`n${i}`, { id: `n${i}`, parent: "n0", depth: 1, status: "kept", text: "t", score: 1 / i });
  }
  const deep = layoutTree(chain);
  const wide = layoutTree(comb);
  assert.ok(deep.width > 4 * deep.height, JSON.stringify([deep.width, deep.height]));
  assert.ok(wide.height > 2 * wide.width, JSON.stringify([wide.width, wide.height]));
});

test("pruned_candidates_fold_into_a_count_per_layer_until_the_layer_is_opened", () => {
  const step = stepOne();
  const folded = layoutTree(step);
  assert.ok(!folded.nodes.some((n) => n.status === "pruned"));
  assert.deepEqual(folded.layers.map((l) => [l.depth, l.hidden]), [[1, 1], [2, 1]]);
  assert.deepEqual(folded.layers[1].reasons, { below_threshold: 1 });
  const open = layoutTree(step, { expandedLayers: new Set([2]) });
  assert.ok(open.nodes.some((n) => n.text === "e" && n.status === "pruned"));
  assert.equal(open.layers[1].hidden, 0);
  assert.equal(collapsibleCount(step, 1), 1);
});

test("an_opened_layer_shows_a_few_per_parent_and_a_chip_for_the_rest", () => {
  const step = stepOne();
  for (let i = 0; i < 5; i++) {
    step.nodes.set(`c2.x${i}`, { id: `c2.x${i}`, parent: "n1", depth: 2, status: "pruned", reason: "budget", text: `z${i}`, score: 0.001 });
  }
  const layout = layoutTree(step, { expandedLayers: new Set([2]), perParent: 2 });
  assert.equal(layout.nodes.filter((n) => n.parent === "n1" && n.status === "pruned").length, 2);
  assert.equal(layout.chips.length, 1);
  assert.equal(layout.chips[0].count, 4);
  assert.equal(layout.chips[0].parent, "n1");
  const all = layoutTree(step, { expandedLayers: new Set([2]), expandedParents: new Set(["n1"]), perParent: 2 });
  assert.equal(all.chips.length, 0);
  assert.equal(all.nodes.filter((n) => n.parent === "n1" && n.status === "pruned").length, 6);
});

test("compare_panes_open_every_layer_with_maxPruned_per_parent", () => {
  const layout = layoutTree(stepOne(), { maxPruned: 0 });
  assert.ok(!layout.nodes.some((n) => n.status === "pruned"));
  assert.equal(layout.nodes.find((n) => n.id === "n0").hidden, 1);
});

test("while_growing_eagle_folds_kept_candidates_it_did_not_grow", () => {
  const events = structuredClone(talonRun.slice(0, 3));
  events[1].candidates.push(candidate(0, 120, "held", 1, 0.02, true, 5, "topk"));
  events[1].candidates[3].expanded = false;
  const step = foldPhase(events, phasesOf(events)[1]).step;
  const layout = layoutTree(step);
  assert.ok(!layout.nodes.some((n) => n.text === "held"));
  assert.deepEqual(layout.layers[0].reasons, { budget: 1, "not grown": 1 });
});

test("labels_carry_marks_so_verdicts_read_without_colour", () => {
  assert.equal(nodeLabel({ status: "accepted", text: " the" }), "✓ ␣the");
  assert.equal(nodeLabel({ status: "rejected", text: "cat" }), "✗ cat");
  assert.equal(nodeLabel({ status: "recovered", text: "sat" }), "↺ sat");
  assert.equal(nodeLabel({ status: "bonus", text: "on" }), "★ on");
  assert.equal(nodeLabel({ status: "kept", text: "a very long token" }), "a␣very␣…");
  assert.equal(nodeLabel({ status: "rejected", text: "<|im_start|>" }), "✗ ⟨start⟩");
  assert.deepEqual(boundsOf([{ x: 1, y: 2, w: 3, h: 4 }, { x: 5, y: 0, w: 1, h: 1 }]), { x: 1, y: 0, w: 5, h: 6 });
});
