import pytest

from controlplane.state import allocation as A
from controlplane.state import experiment as E
from controlplane.state import trial as T
from controlplane.state.machine import IllegalTransition


@pytest.mark.parametrize("machine", [A.ALLOCATION, E.EXPERIMENT, T.TRIAL])
def test_terminal_states_have_no_way_out_but_a_users_request(machine):
    for state in machine.terminal:
        assert set(machine.edges.get(state, {})) <= machine.reopened_to, state


@pytest.mark.parametrize("machine", [A.ALLOCATION, E.EXPERIMENT, T.TRIAL])
def test_every_edge_says_why(machine):
    for edges in machine.edges.values():
        assert all(isinstance(why, str) and why for why in edges.values())


def test_illegal_transitions_are_refused():
    with pytest.raises(IllegalTransition, match="trial: illegal transition COMPLETED -> RUNNING"):
        T.TRIAL.check(T.COMPLETED, T.RUNNING)
    with pytest.raises(IllegalTransition):
        A.ALLOCATION.check(A.PENDING, A.RUNNING)  # must be placed first


def test_the_restart_path_of_a_trial_is_allowed():
    for a, b in [(T.QUEUED, T.RUNNING), (T.RUNNING, T.QUEUED), (T.RUNNING, T.COMPLETED), (T.RUNNING, T.ERROR)]:
        T.TRIAL.check(a, b)
