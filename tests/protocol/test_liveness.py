"""`liveness.listener_is_dead`: the one rule telling a dead listener from a live one; and
the start marks that tell a process from a later one given its pid."""

import os

import pytest
from helpers import dead_pid

from limpyd_blueque.protocol.liveness import (
    BOOT_ID,
    host_name,
    listener_host_and_pid,
    listener_id_for,
    listener_is_dead,
    process_alive,
    process_start_time,
)

NOW = 1000.0
ELSEWHERE = "elsewhere.example.com"


def test_a_listener_whose_worker_record_is_alive_is_alive_whatever_its_process():
    gone = listener_id_for(pid=dead_pid())
    far = listener_id_for(pid=7, host=ELSEWHERE)
    records = {gone: NOW + 1, far: NOW + 1}
    assert listener_is_dead(gone, records, NOW) is False
    assert listener_is_dead(far, records, NOW) is False


def test_a_listener_of_this_host_is_dead_when_its_process_is_gone():
    gone = listener_id_for(pid=dead_pid())
    assert listener_is_dead(gone, {}, NOW) is True
    assert listener_is_dead(gone, {gone: NOW - 1}, NOW) is True
    assert listener_is_dead(f"{host_name()}_notapid", {}, NOW) is False


def test_a_listener_of_this_host_whose_process_runs_is_alive_even_with_an_expired_record():
    mine = listener_id_for(pid=os.getpid())
    assert listener_is_dead(mine, {}, NOW) is False
    assert listener_is_dead(mine, {mine: NOW - 1}, NOW) is False


def test_a_listener_of_another_host_is_dead_only_with_an_expired_worker_record():
    far = listener_id_for(pid=7, host=ELSEWHERE)
    assert listener_is_dead(far, {far: NOW - 1}, NOW) is True
    assert listener_is_dead(far, {far: NOW}, NOW) is True   # alive until now: not after it
    assert listener_is_dead(far, {}, NOW) is False  # another client's listener: not known dead


def test_a_listener_id_splits_on_its_last_underscore():
    assert listener_host_and_pid("my_host.example.com_42") == ("my_host.example.com", 42)
    assert listener_host_and_pid("host_x") == ("host", None)


@pytest.mark.skipif(BOOT_ID is None, reason="start marks from /proc (Linux)")
def test_a_start_mark_keeps_8_characters_of_the_boot_id_and_matches_a_whole_one():
    mark = process_start_time(os.getpid())
    boot, ticks = mark.split(":")
    assert boot == BOOT_ID[:8] and ticks.isdigit()
    assert process_alive(os.getpid(), mark)
    assert process_alive(os.getpid(), f"{BOOT_ID}:{ticks}")  # written by an earlier version
    assert not process_alive(os.getpid(), f"{BOOT_ID}:{int(ticks) + 1}")  # another process
    assert not process_alive(os.getpid(), f"{BOOT_ID[:8]}x:{ticks}")  # another boot
    assert not process_alive(os.getpid(), f"{BOOT_ID[:4]}:{ticks}")  # too short to tell
