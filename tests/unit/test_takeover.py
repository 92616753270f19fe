"""How many copies MirrorMaker 2 made past the position it recorded (its tail), from an offset sync."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient
from hypothesis import given
from hypothesis import strategies as st

from srm.config.parsing import Properties
from srm.config.secrets import default_secret_resolver
from srm.config.settings import SrmConfig
from srm.flow import Flow
from srm.mm2.formats import OffsetSync
from srm.replication.takeover import Takeover, _nearest, mm2_tail


def test_tail_counts_the_copies_past_the_recorded_position():
    # MM2 copied source offsets 0..249 to 0..249, synced 120 → 120, recorded position 201 (next to replicate)
    sync = OffsetSync("t", 0, 120, 120)
    assert mm2_tail(201, 250, sync) == 49  # copies of 201..249
    assert mm2_tail(250, 250, sync) == 0  # a clean stop: nothing past the position


def test_tail_from_a_sync_past_the_position_and_on_a_shifted_target():
    # The target held 10 older records first: source n sits at n + 10. MM2 synced 230 → 240 after recording 201.
    assert mm2_tail(201, 260, OffsetSync("t", 0, 230, 240)) == 49


def test_tail_unknown_without_a_sync():
    assert mm2_tail(201, 250, None) is None


@given(
    shift=st.integers(0, 1000),
    copied=st.integers(1, 500),
    position=st.integers(0, 500),
    synced=st.integers(0, 499),
)
def test_tail_is_the_copies_past_the_position_from_any_sync_of_a_contiguous_copy(shift, copied, position, synced):
    # Source offsets 0..copied-1 copied contiguously to shift..shift+copied-1; MM2 recorded ``position`` as next.
    position, synced = min(position, copied), min(synced, copied - 1)
    assert mm2_tail(position, shift + copied, OffsetSync("t", 0, synced, synced + shift)) == copied - position


def test_nearest_sync_is_the_newest_below_the_position_else_the_oldest_above():
    syncs = [OffsetSync("t", 0, u, u) for u in (0, 100, 200, 300)]
    assert _nearest(syncs, 250) == syncs[2]
    assert _nearest(syncs[3:], 250) == syncs[3]
    assert _nearest(syncs, None) == syncs[3]
    assert _nearest([], 5) is None


def test_for_flow_uses_the_admin_clients_it_is_given():
    # An AdminClient is falsy (its len() counts queued requests): the flow's own clients must not be replaced by new
    # ones each run (topic sync passes the container's).
    config = SrmConfig.from_properties(
        Properties.of({"clusters": "a, b", "a.bootstrap.servers": "127.0.0.1:1", "b.bootstrap.servers": "127.0.0.1:2"})
    )
    source, target = AdminClient({"log_level": 0}), AdminClient({"log_level": 0})
    takeover = Takeover.for_flow(config, Flow("a", "b"), default_secret_resolver, source, target)
    assert takeover.source_admin is source and takeover.target_admin is target
    assert takeover.syncs_admin is source  # MM2's default: the offset syncs live on the source
