// Pure front-end modules: event folding, formatting, URL state, comparison.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  describeNode, foldEvents, outputSegments, runSummary, splitRuns, stepEnds, treeShape,
} from "../../static/js/model/events.js";
import { shadeClass, tokenLabel } from "../../static/js/model/format.js";
import { checkSetup, decodeSetup, encodeSetup, paramControls, setupRules } from "../../static/js/model/setup.js";
import { endedRun, rerankStep as stepEvents } from "./fixtures.mjs";
import { SERVED_POLICIES, SERVED_REQUEST } from "./served.mjs";

test("tokenLabel_makes_whitespace_visible", () => {
  assert.equal(tokenLabel(" the\n"), "␣the↵");
  assert.equal(tokenLabel("\t"), "⇥");
  assert.equal(tokenLabel(""), "∅");
  assert.equal(tokenLabel("<|im_end|>"), "⟨end⟩");
  assert.equal(tokenLabel("\uFFFD"), "⟨bytes⟩");
});

test("fold_maps_verify_verdicts_through_the_rerank_to_pre_rerank_nodes", () => {
  const step = foldEvents(stepEvents).steps[0];
  assert.deepEqual(step.postToId, ["n0", "n1", "n3"]);
  assert.equal(step.nodes.get("n1").status, "accepted");
  assert.equal(step.nodes.get("n3").status, "rejected");
  assert.equal(step.nodes.get("n2").status, "pruned");
  assert.equal(step.nodes.get("n2").reason, "rerank");
  assert.equal(step.nodes.get("emitted").status, "recovered");
  assert.equal(step.nodes.get("emitted").parent, "n1");
  assert.equal(step.nodes.get("n0").text, "x");
});

test("fold_of_a_step_that_ends_the_text_has_no_emitted_token_and_nothing_accepted_past_the_end", () => {
  const step = foldEvents(endedRun).steps[0];
  assert.equal(step.nodes.has("emitted"), false);
  assert.equal(step.emitted, null);
  assert.deepEqual(step.acceptedPath, ["n0", "n1", "n3"]);
  assert.deepEqual(["n1", "n2", "n3", "n4"].map((id) => step.nodes.get(id).status), ["accepted", "rejected", "accepted", "kept"]);
  assert.equal(step.nodes.get("n4").verdict, "unreached");
});

test("fold_matches_tree_positions_by_token_when_a_schema_1_tree_has_no_origin", () => {
  const events = structuredClone(stepEvents);
  events.forEach((e) => { e.schema_version = 1; });
  events[2].nodes.forEach((n) => { delete n.origin; });
  assert.deepEqual(foldEvents(events).steps[0].postToId, ["n0", "n1", "n3"]);
});

test("fold_builds_nodes_from_the_tree_event_when_no_draft_layers_were_seen", () => {
  const step = foldEvents(stepEvents.slice(2)).steps[0];
  assert.equal(step.nodes.get(step.postToId[2]).status, "rejected");
  assert.equal(step.nodes.get(step.postToId[2]).parent, step.postToId[1]);
});

test("partial_fold_shows_the_tree_growing_layer_by_layer", () => {
  const step = foldEvents(stepEvents.slice(0, 1)).steps[0];
  assert.equal(step.nodes.size, 4); // root + 3 candidates
  assert.equal(step.nodes.get("n1").status, "kept");
  assert.equal(step.phase, "draft");
});

test("tree_shape_counts_verified_depth_and_widest_layer", () => {
  assert.deepEqual(treeShape(foldEvents(stepEvents).steps[0]), { depth: 2, width: 1, size: 2 });
});

test("describeNode_explains_the_decision", () => {
  const step = foldEvents(stepEvents).steps[0];
  const rows = Object.fromEntries(describeNode(step.nodes.get("c2.1")));
  assert.match(rows.decision, /below the layer threshold/);
  assert.equal(rows.token, '"e"');
  assert.equal(rows["target p"], "not verified");
});

test("output_segments_group_by_step_and_fall_back_to_the_final_text", () => {
  const run = foldEvents(stepEvents);
  assert.deepEqual(outputSegments(run).map((s) => s.text), ["af"]);
  run.finished = { text: "different", new_tokens: 2 };
  assert.deepEqual(outputSegments(run).map((s) => s.text), ["different"]);
  assert.equal(shadeClass(12), "shade-8");
});

test("setup_round_trips_through_the_url_and_reads_its_parameters_by_the_schema", () => {
  const setup = { prompt: "Hi & <b>", policy: "talon", seed: 3, temperature: 0, max_new_tokens: 64,
                  params: { mu: 0.05, budget: 40, sample: true } };
  const schemas = { talon: { properties: { ...SERVED_POLICIES.talon.properties, sample: { type: "boolean", default: false } } } };
  const back = checkSetup(decodeSetup("?" + encodeSetup(setup)), schemas, setupRules(SERVED_REQUEST, "talon"));
  assert.deepEqual(back, { setup, problems: [] });
});

test("param_controls_carry_schema_defaults_and_bounds", () => {
  const schema = { properties: { mu: { type: "number", default: 0.03, exclusiveMinimum: 0, maximum: 1, title: "Mu", description: "gate (μ)" } } };
  const [mu] = paramControls(schema);
  assert.deepEqual([mu.name, mu.value, mu.min, mu.max, mu.kind], ["mu", 0.03, 0, 1, "number"]);
});

test("replay_helpers_split_runs_and_find_step_ends", () => {
  const other = stepEvents.map((e) => ({ ...e, run_id: "r2" }));
  const runs = splitRuns([...stepEvents, ...other]);
  assert.deepEqual(runs.map((r) => r.runId), ["r1", "r2"]);
  assert.deepEqual(stepEnds(stepEvents), [{ step: 0, end: 6 }]);
});

test("run_summary_estimates_speed_from_step_timings_until_the_run_finishes", () => {
  const run = foldEvents(stepEvents);
  assert.equal(runSummary(run).tokensPerS, 2 / 0.003);
  assert.equal(runSummary(run).tau, 2);
  run.finished = { tokens_per_s: 5, steps: 1, new_tokens: 2, tau: 2, delta: 2, c: 0.5 };
  assert.equal(runSummary(run).tokensPerS, 5);
});
