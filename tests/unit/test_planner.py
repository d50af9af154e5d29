"""The planner against docs/invariants.md: examples first, then the invariants as properties."""

import dataclasses
import random
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from ironic_shard_operator.core import autoscale, model
from ironic_shard_operator.core.model import Autoscale, AutoscaleHistory, Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from ironic_shard_operator.core.pool_memory import autoscale_history_of
from ironic_shard_operator.core.status import CycleFacts, build_status

NOW = 10_000.0
GRACE = 120.0


def uuids(count, seed=0):
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(count)]


def ready(*names):
    return tuple(Member(name, True, 0.0) for name in names)


def pool(names, nodes, replicas=None, now=NOW, autoscale=None):
    spec = PoolSpec("p", replicas=len(names) if replicas is None else replicas,
                    autoscale=autoscale, rebalance_after_seconds=GRACE)
    members = names if names and isinstance(names[0], Member) else ready(*names)
    return Observation(spec, tuple(members), tuple(nodes), now)


def applied(observation, result):
    """The observation after the plan's moves were written to Ironic."""
    owners = owners_after(observation.nodes, result.moves)
    nodes = tuple(Node(n.uuid, owners[n.uuid], n.instance_uuid, n.provision_state,
                       n.target_provision_state, n.reservation) for n in observation.nodes)
    return Observation(observation.spec, observation.members, nodes, observation.now)


def converged(names, count, pinned_every=0, seed=0):
    """A pool of `names` that adopted `count` fresh nodes; every pinned_every-th gets an instance."""
    first = pool(names, [Node(u) for u in uuids(count, seed)])
    state = applied(first, plan(first))
    nodes = tuple(
        Node(n.uuid, n.shard, instance_uuid=f"i-{i}" if pinned_every and i % pinned_every == 0 else None)
        for i, n in enumerate(state.nodes))
    return pool(names, nodes)


def totals(observation):
    return Counter(n.shard for n in observation.nodes)


# --- examples ------------------------------------------------------------------------------

def test_first_adoption_spreads_unassigned_nodes_exactly_evenly():
    state = converged(["p-0", "p-1", "p-2"], 300)
    assert totals(state) == {"p-0": 100, "p-1": 100, "p-2": 100}


def test_a_converged_pool_plans_nothing():
    state = converged(["p-0", "p-1", "p-2"], 301, pinned_every=4)
    result = plan(state)
    assert result.moves == ()
    assert result.members_to_create == () and result.members_to_delete == ()


def test_member_past_the_grace_loses_only_its_free_nodes():
    state = converged(["p-0", "p-1", "p-2"], 600, pinned_every=4)
    failed = (Member("p-0", True, 0.0), Member("p-1", False, NOW - GRACE - 1), Member("p-2", True, 0.0))
    observation = pool(failed, state.nodes)
    result = plan(observation)
    free_of_failed = {n.uuid for n in state.nodes if n.shard == "p-1" and not n.pinned}
    assert {m.node_uuid for m in result.moves} == free_of_failed
    assert all(m.target in ("p-0", "p-2") for m in result.moves)
    after = totals(applied(observation, result))
    assert after["p-1"] == sum(1 for n in state.nodes if n.shard == "p-1" and n.pinned)


def test_member_within_the_grace_keeps_its_nodes():
    state = converged(["p-0", "p-1", "p-2"], 300)
    blinking = (Member("p-0", True, 0.0), Member("p-1", False, NOW - GRACE + 5), Member("p-2", True, 0.0))
    assert plan(pool(blinking, state.nodes)).moves == ()


def test_member_never_ready_gets_nothing_and_keeps_nothing():
    state = converged(["p-0", "p-1"], 100)
    members = ready("p-0", "p-1") + (Member("p-2", False, None),)
    result = plan(pool(members, state.nodes))
    assert result.ring_members == ("p-0", "p-1")
    assert result.moves == ()


def test_a_ready_member_nova_cannot_schedule_to_yet_gets_nothing_until_it_can():
    """A new member whose host Nova has not mapped to a cell (host_mapping.awaiting_nova) gets
    no node: Nova would list it under no hypervisor. Once mapped, it takes its fair share."""
    state = converged(["p-0", "p-1"], 90)
    joined = pool(["p-0", "p-1", "p-2"], state.nodes)
    waiting = plan(dataclasses.replace(joined, awaiting_nova=frozenset({"p-2"})))
    assert waiting.ring_members == ("p-0", "p-1") and waiting.moves == ()
    mapped = plan(joined)
    assert {m.target for m in mapped.moves} == {"p-2"} and len(mapped.moves) == 30


def test_returning_member_gets_its_share_back_with_minimal_movement():
    names = ["p-0", "p-1", "p-2", "p-3"]
    state = converged(names, 1000)
    gone = (Member("p-0", True, 0), Member("p-1", True, 0), Member("p-2", True, 0),
            Member("p-3", False, NOW - 10 * GRACE))
    without = applied(pool(gone, state.nodes), plan(pool(gone, state.nodes)))
    back = pool(names, without.nodes)
    result = plan(back)
    assert len(result.moves) == 250
    assert all(m.target == "p-3" for m in result.moves)
    assert totals(applied(back, result)) == {n: 250 for n in names}


def test_no_ready_member_moves_nothing_not_even_unassigned_nodes():
    members = (Member("p-0", False, None), Member("p-1", False, NOW - 10 * GRACE))
    nodes = [Node(u) for u in uuids(10)] + [Node(u, "p-1") for u in uuids(10, seed=1)]
    result = plan(pool(members, nodes))
    assert result.moves == () and result.ring_members == ()


def test_rounding_moves_nothing_whoever_holds_the_odd_node():
    ids = uuids(10)
    owners = ["p-1"] * 4 + ["p-0"] * 3 + ["p-2"] * 3
    nodes = [Node(u, owner) for u, owner in zip(ids, owners)]
    assert plan(pool(["p-0", "p-1", "p-2"], nodes)).moves == ()


def test_pinned_node_states_never_move():
    members = (Member("p-0", False, NOW - 10 * GRACE), Member("p-1", True, 0.0))
    ids = uuids(5)
    nodes = [
        Node(ids[0], "p-0", instance_uuid="i"),
        Node(ids[1], "p-0", provision_state="cleaning"),
        Node(ids[2], "p-0", provision_state="active", target_provision_state="deleted"),
        Node(ids[3], "p-0", reservation="conductor-1"),
        Node(ids[4], "p-0", provision_state="available"),
    ]
    result = plan(pool(members, nodes))
    assert [(m.node_uuid, m.target) for m in result.moves] == [(ids[4], "p-1")]


def test_pinned_nodes_count_towards_a_members_share():
    ids = uuids(30)
    nodes = [Node(u, "p-0", instance_uuid="i") for u in ids[:10]] + [Node(u) for u in ids[10:]]
    result = plan(pool(["p-0", "p-1"], nodes))
    after = totals(applied(pool(["p-0", "p-1"], nodes), result))
    assert after == {"p-0": 15, "p-1": 15}


def test_member_heavy_with_pinned_nodes_gets_no_free_node():
    ids = uuids(40)
    nodes = [Node(u, "p-0", instance_uuid="i") for u in ids[:30]] + [Node(u) for u in ids[30:]]
    after = totals(applied(pool(["p-0", "p-1"], nodes), plan(pool(["p-0", "p-1"], nodes))))
    assert after == {"p-0": 30, "p-1": 10}


def test_scale_up_adds_the_lowest_free_ordinals():
    state = converged(["p-0", "p-2"], 10)
    result = plan(pool(ready("p-0", "p-2"), state.nodes, replicas=4))
    assert result.members_to_create == ("p-1", "p-3")


def test_scale_down_drains_then_deletes_the_highest_ordinals():
    names = ["p-0", "p-1", "p-2", "p-3"]
    state = converged(names, 400)
    down = pool(names, state.nodes, replicas=2)
    result = plan(down)
    assert result.ring_members == ("p-0", "p-1")
    assert {m.source for m in result.moves} == {"p-2", "p-3"}
    assert result.members_to_delete == ()  # they still own nodes: first the moves
    drained = plan(applied(down, result))
    assert drained.members_to_delete == ("p-2", "p-3")
    assert drained.moves == ()


def test_the_member_spec_retire_members_names_retires_instead_of_the_highest_ordinal():
    """`kubectl ics retire p-1` (replicas 3 -> 2, spec.retireMembers [p-1]): p-1's nodes move to
    p-0 and p-2, then p-1 goes; p-2 stays. A named member counts only for the surplus."""
    names = ["p-0", "p-1", "p-2"]
    state = converged(names, 300)
    down = dataclasses.replace(pool(names, state.nodes, replicas=2),
                               spec=PoolSpec("p", replicas=2, rebalance_after_seconds=GRACE, retire_first=("p-1",)))
    result = plan(down)
    assert result.ring_members == ("p-0", "p-2") and result.retiring == ("p-1",)
    assert {m.source for m in result.moves} == {"p-1"}
    assert plan(applied(down, result)).members_to_delete == ("p-1",)
    steady = dataclasses.replace(down, spec=dataclasses.replace(down.spec, replicas=3))
    assert plan(steady).retiring == () and plan(steady).moves == ()  # named, but no member too many
    two_down = dataclasses.replace(down, spec=dataclasses.replace(down.spec, replicas=1))
    assert plan(two_down).retiring == ("p-1", "p-2")  # the named one, then the highest ordinal


def test_scale_down_is_blocked_by_pinned_nodes_and_says_how_many():
    names = ["p-0", "p-1", "p-2"]
    state = converged(names, 90)
    nodes = tuple(Node(n.uuid, n.shard, instance_uuid="i" if n.shard == "p-2" and i % 3 == 0 else None)
                  for i, n in enumerate(state.nodes))
    pinned_on_p2 = sum(1 for n in nodes if n.shard == "p-2" and n.pinned)
    down = pool(names, nodes, replicas=2)
    result = plan(down)
    assert result.scale_down_blocked == {"p-2": pinned_on_p2}
    assert result.members_to_delete == ()
    settled = plan(applied(down, result))
    assert settled.members_to_delete == () and settled.scale_down_blocked == {"p-2": pinned_on_p2}
    # The instances go: the former pinned nodes are drained first, then the member is deleted.
    freed = pool(names, tuple(Node(n.uuid, n.shard) for n in applied(down, result).nodes), replicas=2)
    draining = plan(freed)
    assert draining.scale_down_blocked == {} and {m.source for m in draining.moves} == {"p-2"}
    assert plan(applied(freed, draining)).members_to_delete == ("p-2",)


def test_scale_to_zero_deletes_members_without_pinned_nodes_and_leaves_nodes_where_they_are():
    state = converged(["p-0", "p-1"], 20)
    result = plan(pool(["p-0", "p-1"], state.nodes, replicas=0))
    assert result.moves == ()
    assert result.members_to_delete == ("p-0", "p-1")


def test_autoscale_follows_node_count_within_bounds():
    nodes = [Node(u) for u in uuids(1201)]
    assert plan(pool(["p-0"], nodes, autoscale=Autoscale(1, 10, 500))).desired_replicas == 3
    assert plan(pool(["p-0"], nodes, autoscale=Autoscale(1, 2, 500))).desired_replicas == 2
    assert plan(pool(["p-0"], nodes[:10], autoscale=Autoscale(2, 5, 500))).desired_replicas == 2


def test_the_plan_says_how_autoscale_chose_its_member_count():
    nodes = [Node(u) for u in uuids(1201)]
    capped = plan(pool(["p-0"], nodes, autoscale=Autoscale(1, 2, 500))).autoscale
    assert (capped.nodes, capped.by_nodes, capped.recommendation, capped.desired) == (1201, 3, 2, 2)
    assert capped.settings == Autoscale(1, 2, 500)
    assert plan(pool(["p-0"], nodes, replicas=1)).autoscale is None


def test_nodes_owned_by_strangers_are_adopted_unless_pinned():
    ids = uuids(4)
    nodes = [Node(ids[0], "legacy"), Node(ids[1], "legacy", instance_uuid="i"), Node(ids[2]), Node(ids[3], "p-0")]
    result = plan(pool(["p-0"], nodes))
    assert sorted(m.node_uuid for m in result.moves) == sorted([ids[0], ids[2]])
    assert result.counts.misplaced == 1
    assert result.counts.unassigned == 1


def test_status_counts():
    state = converged(["p-0", "p-1"], 100, pinned_every=5)
    counts = plan(state).counts
    assert (counts.total, counts.pinned, counts.free, counts.pending_moves) == (100, 20, 80, 0)
    loads = {load.name: (load.nodes, load.pinned) for load in plan(state).loads}
    assert sum(n for n, _ in loads.values()) == 100 and sum(p for _, p in loads.values()) == 20


# --- properties ----------------------------------------------------------------------------

MEMBER_STATES = st.sampled_from(["ready", "new", "grace", "gone"])


@st.composite
def observations(draw):
    count = draw(st.integers(0, 7))
    members = []
    for i in range(count):
        state = draw(MEMBER_STATES)
        since = {"ready": 0.0, "new": None, "grace": NOW - GRACE / 2, "gone": NOW - 2 * GRACE}[state]
        members.append(Member(f"p-{i}", state == "ready", since))
    owners = st.one_of(st.none(), st.sampled_from(["legacy"] + [f"p-{i}" for i in range(9)]))
    node_count = draw(st.integers(0, 120))
    ids = uuids(node_count, seed=draw(st.integers(0, 3)))
    nodes = tuple(
        Node(u, draw(owners), instance_uuid="i" if draw(st.integers(0, 4)) == 0 else None,
             provision_state=draw(st.sampled_from(["available", "active", "manageable", "cleaning"])))
        for u in ids)
    replicas = draw(st.integers(0, 9))
    spec = PoolSpec("p", replicas=replicas, rebalance_after_seconds=GRACE)
    return Observation(spec, tuple(members), nodes, NOW)


@settings(max_examples=300, deadline=None)
@given(observations())
def test_invariants_hold_for_any_observation(observation):
    result = plan(observation)
    after = applied(observation, result)
    ring = set(result.ring_members)
    before_owner = {n.uuid: n.shard for n in observation.nodes}
    pinned = {n.uuid for n in observation.nodes if n.pinned}

    # 2. a pinned node never changes owner
    assert not {m.node_uuid for m in result.moves} & pinned
    # moves are real changes, listed once
    assert all(before_owner[m.node_uuid] == m.source != m.target for m in result.moves)
    assert len({m.node_uuid for m in result.moves}) == len(result.moves)

    if not ring:
        # 3. with no ready member, free nodes stay where they are
        assert result.moves == ()
        return
    # 1 + 3. after convergence every free node is owned by a ready member of the pool
    assert all(n.shard in ring for n in after.nodes if not n.pinned)

    # balance: totals of members that take free nodes differ by at most one, and no member
    # is left more than one below them (pinned nodes alone may put a member above)
    total = Counter(n.shard for n in after.nodes if n.shard in ring)
    free = Counter(n.shard for n in after.nodes if n.shard in ring and not n.pinned)
    takers = [m for m in ring if free[m]]
    if takers:
        top = max(total[m] for m in takers)
        assert top - min(total[m] for m in takers) <= 1
        assert all(total[m] >= top - 1 for m in ring)

    # 4. minimal movement: no member both gives nodes away and receives nodes
    gives = {m.source for m in result.moves}
    receives = {m.target for m in result.moves}
    assert not gives & receives

    # 6. idempotence: planning on the result of a plan yields no moves
    assert plan(after).moves == ()


@settings(max_examples=300, deadline=None)
@given(observations(), st.randoms(use_true_random=False))
def test_an_interrupted_plan_converges_to_the_same_end_state(observation, rng):
    """7. Any part of a plan written, then planning again, ends where the whole plan ends."""
    whole = plan(observation)
    done = [m for m in whole.moves if rng.random() < 0.5]
    partial = applied(observation, dataclasses.replace(whole, moves=tuple(done)))
    again = plan(partial)
    assert owners_after(partial.nodes, again.moves) == owners_after(observation.nodes, whole.moves)


@settings(max_examples=100, deadline=None)
@given(observations(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_input_order(observation, rng):
    nodes, members = list(observation.nodes), list(observation.members)
    rng.shuffle(nodes)
    rng.shuffle(members)
    shuffled = Observation(observation.spec, tuple(members), tuple(nodes), observation.now)
    assert plan(shuffled) == plan(observation)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 12), st.integers(50, 600), st.integers(0, 3))
def test_join_and_leave_move_what_consistent_hashing_needs(members, nodes, seed):
    names = [f"p-{i}" for i in range(members)]
    state = converged(names, nodes, seed=seed)

    joined = pool(names + [f"p-{members}"], state.nodes)
    join_moves = len(plan(joined).moves)
    assert join_moves <= -(-nodes // (members + 1))   # ceil(N / (M+1)): the joiner's share

    leaver = names[seed % members]
    left = pool(tuple(Member(n, n != leaver, 0.0) for n in names), state.nodes)
    leave_moves = plan(left).moves
    assert len(leave_moves) == sum(1 for n in state.nodes if n.shard == leaver)
    assert all(m.source == leaver for m in leave_moves)


# --- autoscale: up at once, down once the lower count has held (core/autoscale.py) -----------

WINDOW = 300


def scaling(minimum=1, maximum=10, per_member=100, window=WINDOW):
    return Autoscale(minimum, maximum, per_member, window)


def test_autoscale_scales_up_at_once_and_down_only_after_the_window():
    rule = scaling()
    first = autoscale.decide(rule, 300, AutoscaleHistory(), 0.0)
    assert first.desired == 3 and first.held_until is None
    up = autoscale.decide(rule, 450, first.history, 10.0)
    assert (up.recommendation, up.desired, up.held_until) == (5, 5, None)
    down = autoscale.decide(rule, 250, up.history, 20.0)  # 3 now: first seen lower at t=20
    assert (down.recommendation, down.desired, down.held_until) == (3, 5, 20.0 + WINDOW)
    still = autoscale.decide(rule, 250, down.history, 20.0 + WINDOW - 1)
    assert still.desired == 5 and still.history == down.history  # nothing new to keep
    after = autoscale.decide(rule, 250, still.history, 20.0 + WINDOW)
    assert (after.desired, after.held_until, after.history.peaks) == (3, None, ())


def test_a_stepwise_decline_steps_down_one_window_after_each_count_was_last_wanted():
    rule = scaling()
    history = autoscale.decide(rule, 500, AutoscaleHistory(), 0.0).history
    history = autoscale.decide(rule, 400, history, 100.0).history   # 5 wanted until t=100
    decision = autoscale.decide(rule, 300, history, 200.0)          # 4 wanted until t=200
    assert [(p.replicas, p.last_wanted) for p in decision.history.peaks] == [(5, 100.0), (4, 200.0)]
    assert decision.desired == 5
    assert autoscale.decide(rule, 300, decision.history, 100.0 + WINDOW).desired == 4
    assert autoscale.decide(rule, 300, decision.history, 200.0 + WINDOW).desired == 3


def test_a_window_the_operator_did_not_see_never_lowers_the_count():
    """The operator was down (or Ironic unreadable) for an hour: the lower count is first seen
    when it looks again, and must hold a whole window from then."""
    rule = scaling()
    before = autoscale.decide(rule, 500, AutoscaleHistory(), 0.0)
    after_an_hour = autoscale.decide(rule, 200, before.history, 3600.0)
    assert (after_an_hour.desired, after_an_hour.held_until) == (5, 3600.0 + WINDOW)


def test_bounds_apply_at_once_and_a_zero_window_scales_down_at_once():
    held = autoscale.decide(scaling(), 200, autoscale.decide(scaling(), 800, AutoscaleHistory(), 0.0).history, 1.0)
    assert held.desired == 8
    assert autoscale.decide(scaling(maximum=4), 200, held.history, 2.0).desired == 4  # maxReplicas lowered
    assert autoscale.decide(scaling(minimum=6), 200, held.history, 2.0).desired == 8
    assert autoscale.decide(scaling(window=0), 200, held.history, 2.0).desired == 2


def test_a_held_count_retires_no_member():
    """Three members serve 300 nodes; 100 nodes leave (2 members' worth): within the window
    the plan keeps all three in the ring, where without the window it would retire p-2."""
    rule = scaling()
    state = converged(["p-0", "p-1", "p-2"], 300)
    fewer = pool(["p-0", "p-1", "p-2"], state.nodes[::3] + state.nodes[1::3], autoscale=rule)
    history = autoscale.decide(rule, 300, AutoscaleHistory(), NOW - 60).history
    held = plan(dataclasses.replace(fewer, autoscale_history=history))
    assert (held.autoscale.recommendation, held.desired_replicas, held.autoscale.held_until) == (2, 3, NOW + WINDOW)
    assert held.members_to_delete == () and "p-2" in held.ring_members
    unheld = plan(dataclasses.replace(fewer, autoscale_history=held.autoscale.history, now=NOW + WINDOW))
    assert unheld.desired_replicas == 2 and "p-2" not in unheld.ring_members


def reference_count(samples, window, maximum):
    """HPA's scale-down rule over a step function: each sample's count holds until the next
    sample; the count at the last sample is the highest that held within the window."""
    *earlier, (now, last) = samples
    held = [count for (_, count), (until, _) in zip(earlier, samples[1:]) if until > now - window]
    return min(maximum, max([last, *held]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 1200), st.booleans()), min_size=1, max_size=40),
       st.integers(0, 900))
def test_autoscale_is_the_highest_recommendation_of_the_window_even_across_restarts(steps, window):
    """Any node count sequence at any cycle spacing; `restart` round-trips the history through
    the status the operator writes, as a restarted operator reads it back."""
    rule = scaling(per_member=100, window=window)
    history, now, samples = AutoscaleHistory(), 0, []
    for gap, nodes, restart in steps:
        now += gap
        if restart:
            history = autoscale_history_of(build_status(status_facts(rule, history, now), None)[0])
        decision = autoscale.decide(rule, nodes, history, float(now))
        samples.append((now, decision.recommendation))
        assert decision.desired == reference_count(samples, window, rule.max_replicas)
        history = decision.history
        assert len(history.peaks) <= rule.max_replicas


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3600), st.integers(2, 10),
       st.lists(st.tuples(st.integers(0, 3600), st.floats(0, 1, exclude_max=True), st.integers(1, 5)),
                min_size=1, max_size=30))
def test_a_count_wandering_across_a_boundary_faster_than_the_window_never_retires_a_member(window, high, stays):
    """The node count crosses the boundary between `high` and `high - 1` members, back and forth,
    at any pace; each stay below it, from the first cycle that sees it to the first that sees the
    higher count again, is shorter than the window: the pool never has fewer than `high`."""
    rule = scaling(per_member=100, window=window)
    above, below = (high - 1) * 100 + 1, (high - 1) * 100
    decision = autoscale.decide(rule, above, AutoscaleHistory(), 0.0)
    now, counts = 0.0, [decision.desired]
    for gap, fraction, cycles_below in stays:
        now += gap
        first_below, stay = now + 1, int(fraction * window)  # stay < window
        for k in range(cycles_below):
            decision = autoscale.decide(rule, below, decision.history, first_below + stay * k / cycles_below)
            counts.append(decision.desired)
        now = first_below + stay
        decision = autoscale.decide(rule, above, decision.history, now)
        counts.append(decision.desired)
    assert min(counts) == high


def status_facts(rule, history, now):
    """The facts of a cycle whose plan carries `history` (for a status round trip)."""
    decision = model.AutoscaleDecision(settings=rule, nodes=0, by_nodes=0, recommendation=rule.min_replicas,
                                       desired=rule.min_replicas, history=history)
    return CycleFacts(generation=1, now=float(now), plan=model.Plan(
        rule.min_replicas, (), (), (), (), {}, (), model.NodeCounts(), autoscale=decision))
