"""`liveness.listener_is_dead`: the one rule telling a dead listener from a live one."""

import os

from helpers import dead_pid

from limpyd_blueque.protocol.liveness import (
    host_name,
    listener_host_and_pid,
    listener_id_for,
    listener_is_dead,
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
