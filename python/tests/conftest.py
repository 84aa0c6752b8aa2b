"""Shared fixtures: a clean distribution and seed for every test."""

import os
import sys

import pytest

# The package root (python/), for runs without PYTHONPATH or the .pth file.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autoshard.keras as keras  # noqa: E402


@pytest.fixture(autouse=True)
def no_distribution():
    keras.distribution.set_distribution(None)
    keras.utils.set_random_seed(1)
    yield
    keras.distribution.set_distribution(None)
