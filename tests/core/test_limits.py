"""The one check for a number typed as text (trainperf.core.limits.ascii_digits)."""

import pytest

from trainperf.core.limits import ascii_digits


@pytest.mark.parametrize("text", ["0", "7", "0042", "18446744073709551616"])
def test_digits_0_9_are_digits(text):
    assert ascii_digits(text)


@pytest.mark.parametrize("text", ["", " 1", "1 ", "+1", "-1", "1.0", "1e3", "²", "٣", "1²", "1\n"])
def test_anything_else_is_not(text):
    # str.isdigit is true for '²' (int raises) and '٣' (int reads 3, CUDA and Slurm do not)
    assert not ascii_digits(text)
