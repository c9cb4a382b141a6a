#!/usr/bin/env python3
r"""``python -m captum_ext.cli``: the ``captum-ext`` command without
installing the package."""

import sys

from captum_ext.cli.entry import main

sys.exit(main())
