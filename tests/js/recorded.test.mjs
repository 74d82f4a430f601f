// The pure modules over runs the engine really emitted (tests/js/recorded.mjs, re-recorded from tiny-model
// runs by tests/recorded_fixtures.py): what the page folds, phases and narrates agrees with the engine's own
// step metrics and totals, for every recorded policy.
import assert from "node:assert/strict";
import { test } from "node:test";

import { foldEvents, outputSegments, runSummary, treeShape } from "../../static/js/model/events.js";
import { narrate } from "../../static/js/model/narration.js";
import { foldPhase, phasesOf, walkNodes } from "../../static/js/model/phases.js";
import * as recorded from "./recorded.mjs";

const runs = Object.entries(recorded);

test("the_folded_output_is_the_engine's_text", () => {
  for (const [name, events] of runs) {
    const run = foldEvents(events);
    const finished = events.find((e) => e.type === "run_finished");
    assert.equal(outputSegments(run).map((s) => s.text).join(""), finished.text, name);
    const summary = runSummary(run);
    assert.equal(summary.steps, finished.steps, name);
    assert.equal(summary.tau, finished.tau, name);
  }
});

test("each_folded_step_has_the_shape_the_engine_measured", () => {
  for (const [name, events] of runs) {
    const metrics = events.filter((e) => e.type === "step_metrics");
    const steps = foldEvents(events).steps;
    assert.equal(steps.length, metrics.length, name);
    steps.forEach((step, i) => {
      const { depth, width, tree_size: size } = metrics[i];
      assert.deepEqual(treeShape(step), { depth, width, size }, `${name} step ${metrics[i].step}`);
    });
  }
});

test("every_step_plays_draft_layers_then_verify_then_one_accept_per_walked_node_then_commit", () => {
  for (const [name, events] of runs) {
    const phases = phasesOf(events);
    for (const verify of events.filter((e) => e.type === "verify")) {
      const mine = phases.filter((p) => p.step === verify.step).map((p) => p.name);
      const layers = events.filter((e) => e.type === "draft_layer" && e.step === verify.step).length;
      const accepts = walkNodes(verify).length;
      const order = mine.filter((n) => n !== "rerank");
      assert.deepEqual(order, [...Array(layers).fill("draft"), "verify", ...Array(accepts).fill("accept"), "commit"],
                       `${name} step ${verify.step}`);
    }
  }
});

test("every_phase_of_every_recorded_run_is_narrated_with_numbers_that_exist", () => {
  for (const [name, events] of runs) {
    for (const phase of phasesOf(events)) {
      const { title, text } = narrate(events, phase, foldPhase(events, phase));
      assert.ok(title && text, `${name} ${phase.name} ${phase.step}`);
      assert.doesNotMatch(`${title} ${text}`, /undefined|NaN|null|\[object/, `${name} ${phase.name} step ${phase.step}: ${text}`);
    }
  }
});
