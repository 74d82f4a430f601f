// PhasePlayer: one cursor over phases; PlayerGroup: several players moved together.
import assert from "node:assert/strict";
import { test } from "node:test";

import { phaseKey } from "../../static/js/model/phases.js";
import { PhasePlayer, PlayerGroup } from "../../static/js/player.js";
import { arRun, talonRun } from "./fixtures.mjs";

const at = (player) => `${player.phase.stepIndex + 1}:${phaseKey(player.phase)}`;

test("arrows_move_one_phase_shift_arrows_one_step_home_and_end_the_run", () => {
  const player = new PhasePlayer();
  player.load([...talonRun]);
  assert.equal(at(player), "1:draft-1", "a recorded run opens at its first phase");
  player.next();
  player.next();
  assert.equal(at(player), "1:verify");
  player.nextStep();
  assert.equal(at(player), "2:verify", "the same kind of phase in the next step");
  player.prev();
  assert.equal(at(player), "2:draft-1");
  player.prevStep();
  assert.equal(at(player), "1:draft-1");
  player.end();
  assert.equal(at(player), "2:commit");
  assert.equal(player.cursor, talonRun.length);
  player.next();
  assert.equal(at(player), "2:commit", "past the end stays at the end");
  player.home();
  assert.equal(at(player), "1:draft-1");
  player.prev();
  assert.equal(at(player), "1:draft-1");
});

test("load_opens_at_a_given_position", () => {
  const player = new PhasePlayer();
  player.load([...talonRun], { at: { stepIndex: 1, name: "accept", walked: 2 } });
  assert.equal(at(player), "2:accept-2");
});

test("a_live_run_follows_the_newest_phase_until_the_viewer_steps_back", () => {
  const player = new PhasePlayer();
  player.load([], { follow: true });
  assert.equal(player.phase, null);
  talonRun.slice(0, 3).forEach((e) => player.push(e));
  assert.equal(at(player), "1:draft-2");
  talonRun.slice(3, 5).forEach((e) => player.push(e));
  assert.equal(at(player), "1:accept-2", "a verify event brings the whole walk");
  player.prev();
  talonRun.slice(5, 7).forEach((e) => player.push(e));
  assert.equal(at(player), "1:accept-1", "looking back stays there");
  player.end();
  player.push(talonRun[7]);
  assert.equal(at(player), "2:draft-1", "End follows again");
});

test("play_walks_phase_by_phase_and_stops_at_the_end", async () => {
  const seen = [];
  const player = new PhasePlayer({ speed: 1000, onChange: (p) => seen.push(p.index) });
  player.load([...talonRun]);
  player.play();
  assert.equal(player.playing, true);
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(player.playing, false);
  assert.equal(player.index, player.phases.length - 1);
  const distinct = [...new Set(seen)];
  assert.deepEqual(distinct, [...distinct].sort((a, b) => a - b), "forward, one phase at a time");
  assert.equal(distinct.length, player.phases.length);
});

test("tokens_emitted_map_to_steps_both_ways", () => {
  const player = new PhasePlayer();
  player.load([...talonRun]);
  assert.deepEqual([0, 1, 2].map((k) => player.emittedBefore(k)), [0, 2, 4]);
  assert.deepEqual([0, 1, 2, 3, 9].map((n) => player.stepAtToken(n)), [0, 0, 1, 1, 1]);
});

test("a_group_moves_every_player_to_the_leaders_step_and_kind_of_phase", async () => {
  const talon = new PhasePlayer();
  const ar = new PhasePlayer();
  talon.load([...talonRun]);
  ar.load([...arRun]);
  let changes = 0;
  const group = new PlayerGroup([talon, ar], { onChange: () => changes++ });
  group.next();
  group.next();
  assert.deepEqual([at(talon), at(ar)], ["1:verify", "1:verify"]);
  group.nextStep();
  assert.deepEqual([at(talon), at(ar)], ["2:verify", "2:verify"]);
  group.home();
  assert.deepEqual([at(talon), at(ar)], ["1:draft-1", "1:verify"]);
  assert.ok(changes >= 4);
  talon.speed = 1000;
  group.play();
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.deepEqual([at(talon), at(ar)], ["2:commit", "2:commit"], "play carries the followers along");
});

test("a_group_aligns_by_tokens_through_a_custom_align", () => {
  const talon = new PhasePlayer();
  const ar = new PhasePlayer();
  talon.load([...talonRun]);
  ar.load([...arRun]);
  const byTokens = (position, leader, follower) =>
    ({ ...position, stepIndex: follower.stepAtToken(leader.emittedBefore(position.stepIndex)) });
  const group = new PlayerGroup([talon, ar], { align: byTokens });
  group.seekStep(1);
  assert.equal(ar.phase.stepIndex, 1, "talon's step 2 starts at output token 2; ar has only two tokens, so its last step");
});
