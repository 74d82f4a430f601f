// What-if's pure parts: the message a step's re-run sends, when the control is offered, the step's numbers.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  comparisonRows, foldedStep, prefixBefore, stepSummary, whatIfAvailability, whatIfMessage, whatIfTitle,
} from "../../static/js/model/whatif.js";
import { sampledRun, talonRun } from "./fixtures.mjs";

const SERVER = { replay_only: false, target: "t" };

test("the prefix of a step is every token the run emitted before it", () => {
  assert.deepEqual(prefixBefore(talonRun, 1), []);
  assert.deepEqual(prefixBefore(talonRun, 2), [97, 103]);
  assert.deepEqual(prefixBefore(talonRun, 3), [97, 103, 104, 105]);
});

test("a what-if message carries the run's prompt, sampling and length with the policy to try", () => {
  const message = whatIfMessage(talonRun, 2, { policy: "talon", params: { mu: 0.5 } });
  assert.deepEqual(message, {
    type: "what_if", step: 2, prefix: [97, 103], prompt: "p", policy: "talon", params: { mu: 0.5 },
    temperature: 0, top_k: 0, top_p: 1, seed: 0, max_new_tokens: 4, drafter: "head",
  });
});

test("a drafter this server did not load is left to its default, and the control says so", () => {
  assert.equal("drafter" in whatIfMessage(talonRun, 2, { policy: "talon" }, ["draft-lm"]), false);
  assert.equal(whatIfMessage(talonRun, 2, { policy: "talon" }, ["head"]).drafter, "head");
  const { note } = whatIfAvailability({ ...SERVER, drafters: ["draft-lm"], default_drafter: "draft-lm" }, talonRun, 2);
  assert.match(note, /no head drafter: its default, draft-lm, drafts instead/);
});

test("a run with no drafter (ar) names none, so another policy gets the server's default drafter", () => {
  const ar = [{ ...talonRun[0], policy: "ar", drafter: "none" }];
  assert.equal("drafter" in whatIfMessage(ar, 1, { policy: "talon" }), false);
});

test("on a replay-only server the control says it needs the model", () => {
  const { ok, reason } = whatIfAvailability({ replay_only: true }, talonRun, 1);
  assert.equal(ok, false);
  assert.match(reason, /needs the model/);
});

test("the control waits for a run and its first step, and refuses another target's recording", () => {
  assert.equal(whatIfAvailability(SERVER, [], null).ok, false);
  assert.match(whatIfAvailability(SERVER, talonRun.slice(0, 1), null).reason, /first step/);
  const elsewhere = whatIfAvailability({ ...SERVER, target: "other" }, talonRun, 1);
  assert.equal(elsewhere.ok, false);
  assert.match(elsewhere.reason, /this server runs other/);
  const available = whatIfAvailability(SERVER, talonRun, 1);
  assert.equal(available.ok, true);
  assert.match(available.note, /Greedy/);
  assert.match(whatIfAvailability({ ...SERVER, target: sampledRun[0].target }, sampledRun, 1).note, /draws afresh/);
  assert.match(whatIfAvailability({ ...SERVER, dtype: "bfloat16" }, talonRun, 1).note, /in float32, this server runs bfloat16/);
});

test("a step's summary counts what was kept, pruned and why, the verdicts and τ", () => {
  const summary = stepSummary(foldedStep(talonRun, 1));
  assert.equal(summary.kept, 4);
  assert.equal(summary.pruned, 2);
  assert.deepEqual(summary.reasons, { budget: 1, below_threshold: 1 });
  assert.deepEqual(summary.verdicts, { accepted: 1, rejected: 2, unreached: 1 });
  assert.deepEqual(summary.emitted, { kind: "recovered", text: "g" });
  assert.equal(summary.tau, 2);
  assert.equal(summary.accepted, 1);
  assert.deepEqual(summary.thresholds, [null, 0.015]);
  assert.equal(foldedStep(talonRun, 9), null);
});

test("the comparison puts the run's numbers beside the what-if's, row by row", () => {
  const rows = comparisonRows(stepSummary(foldedStep(talonRun, 1)), stepSummary(foldedStep(talonRun, 2)));
  const byKey = Object.fromEntries(rows.map(([label, original, whatIf, key]) => [key, [original, whatIf]]));
  assert.deepEqual(byKey.kept, [4, 1]);
  assert.deepEqual(byKey.pruned, [2, 0]);
  assert.deepEqual(byKey.tau, [2, 2]);
  assert.deepEqual(byKey.verdicts, ["2 / 1", "0 / 0"]);
  assert.deepEqual(byKey.emitted, ['recovered "g"', 'bonus "i"']);
  assert.deepEqual(comparisonRows(null, null).map((row) => row[1]), Array(rows.length).fill(null));
});

test("a what-if's title names only what it changed", () => {
  const original = { policy: "talon", params: { budget: 60, mu: 0.03 } };
  assert.equal(whatIfTitle(original, { policy: "talon", params: { budget: 60, mu: 0.5 } }), "talon · mu 0.5");
  assert.equal(whatIfTitle(original, { policy: "talon", params: { budget: 60, mu: 0.03 } }), "talon · as the run");
  assert.equal(whatIfTitle(original, { policy: "chain", params: { gamma: 3 } }), "chain · gamma 3");
});
