#!/usr/bin/env python3
r"""Helpers only the application's jobs use: whole-or-nothing files
(:mod:`~captum_ext.evaluation._utils.atomic`) and torch's CPU threads for a job
(:mod:`~captum_ext.evaluation._utils.threads`). The library's own helpers are in
:mod:`captum_ext._utils`."""
