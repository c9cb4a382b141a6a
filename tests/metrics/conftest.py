#!/usr/bin/env python3
import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    # The models here are tiny: thread start-up and contention on a shared
    # machine cost far more than the work, so run them on one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
