// Phases: a step plays as draft layers, rerank, verify, the accept walk node by node, and commit.
import assert from "node:assert/strict";
import { test } from "node:test";

import { foldPhase, nearestPhase, parsePosition, phaseKey, phasesOf, phaseTitle } from "../../static/js/model/phases.js";
import { arRun, candidate, talonRun } from "./fixtures.mjs";
import { SERVED_POLICIES } from "./served.mjs";

const names = (phases) => phases.map(phaseKey);

test("a_step_plays_as_draft_layers_then_verify_then_one_accept_phase_per_walked_node_then_commit", () => {
  const phases = phasesOf(talonRun);
  assert.deepEqual(names(phases), [
    "draft-1", "draft-2", "verify", "accept-1", "accept-2", "commit",
    "draft-1", "verify", "accept-1", "accept-2", "commit",
  ]);
  assert.deepEqual(phases.map((p) => p.stepIndex), [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
  assert.equal(phases[phases.length - 1].end, talonRun.length, "the last commit includes run_finished");
  assert.equal(phases[5].end, 7, "commit folds the step's text and metrics");
});

test("a_rerank_phase_appears_where_the_tree_event_drops_candidates", () => {
  const events = structuredClone(talonRun);
  events[3].pruned = [candidate(0, 98, " b", 1, 0.3, false, 2, "rerank")];
  assert.deepEqual(names(phasesOf(events)).slice(0, 4), ["draft-1", "draft-2", "rerank", "verify"]);
  const eagle = talonRun.map((e) => ({ ...e, policy: "eagle" }));
  assert.ok(names(phasesOf(eagle, SERVED_POLICIES)).includes("rerank"), "eagle always reranks");
  assert.ok(!names(phasesOf(talonRun, SERVED_POLICIES)).includes("rerank"), "talon only where its tree drops some");
});

test("plain_decoding_has_verify_accept_and_commit_only", () => {
  assert.deepEqual(names(phasesOf(arRun)), ["verify", "accept-1", "commit", "verify", "accept-1", "commit"]);
});

test("a_live_run_has_phases_only_for_the_events_so_far", () => {
  assert.deepEqual(names(phasesOf(talonRun.slice(0, 3))), ["draft-1", "draft-2"]);
  assert.deepEqual(names(phasesOf(talonRun.slice(0, 5))), ["draft-1", "draft-2", "verify", "accept-1", "accept-2"]);
});

test("verify_hides_every_verdict_and_the_walk_reveals_them_node_by_node", () => {
  const phases = phasesOf(talonRun);
  const statuses = (phase) => {
    const { step } = foldPhase(talonRun, phase);
    return Object.fromEntries([...step.nodes.values()].map((n) => [n.text, n.status]));
  };
  assert.deepEqual(statuses(phases[2]), { x: "root", a: "kept", " b": "kept", c: "pruned", d: "kept", e: "pruned", f: "kept" });
  assert.deepEqual(statuses(phases[3]), { x: "root", a: "accepted", " b": "rejected", c: "pruned", d: "kept", e: "pruned", f: "kept" });
  assert.deepEqual(statuses(phases[4]), { x: "root", a: "accepted", " b": "rejected", c: "pruned", d: "rejected", e: "pruned",
                                          f: "kept", g: "recovered" });
  assert.equal(foldPhase(talonRun, phases[5]).step.nodes.get("emitted").text, "g");
});

test("draft_phases_name_the_root_from_the_tree_event_ahead", () => {
  const { step } = foldPhase(talonRun, phasesOf(talonRun)[0]);
  assert.equal(step.nodes.get("n0").text, "x");
  assert.equal(step.nodes.size, 4, "layer 1 only: root and three candidates");
});

test("nearest_phase_keeps_the_kind_of_phase_across_steps_of_different_shapes", () => {
  const phases = phasesOf(talonRun);
  assert.equal(phaseKey(nearestPhase(phases, { stepIndex: 1, name: "draft", layer: 2 })), "draft-1");
  assert.equal(phaseKey(nearestPhase(phases, { stepIndex: 1, name: "rerank" })), "draft-1");
  assert.equal(phaseKey(nearestPhase(phases, { stepIndex: 1, name: "accept", walked: 2 })), "accept-2");
  assert.equal(nearestPhase(phases, { stepIndex: 9, name: "verify" }).index, phases.length - 1);
  const ar = phasesOf(arRun);
  assert.equal(phaseKey(nearestPhase(ar, { stepIndex: 1, name: "draft", layer: 3 })), "verify");
});

test("url_positions_round_trip_through_phase_keys", () => {
  const phases = phasesOf(talonRun);
  for (const phase of phases) {
    const position = parsePosition(String(phase.stepIndex + 1), phaseKey(phase));
    assert.equal(nearestPhase(phases, position), phase);
  }
  assert.equal(parsePosition("0", "verify"), null);
  assert.equal(parsePosition("2", "lunch"), null);
  assert.equal(phaseTitle(phases[4]), "accept · node 2 of 2");
});
