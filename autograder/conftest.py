"""Run the hidden checks as a pytest suite: pytest autograder/causal_head --submission NB.ipynb"""
import pytest

from autograder.judge import run_submission


def pytest_addoption(parser):
    parser.addoption("--submission", help="the notebook to judge")


@pytest.fixture(scope="module")
def _judged(request):
    path = request.config.getoption("--submission")
    if not path:
        pytest.fail("pass --submission NOTEBOOK.ipynb")
    results, plan, _, _ = run_submission(path, request.module.__name__.split(".")[-2])
    return results, plan


@pytest.fixture
def results(_judged):
    return _judged[0]


@pytest.fixture
def plan(_judged):
    return _judged[1]
