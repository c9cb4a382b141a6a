#!/usr/bin/env python3
r"""The application's default models and what they are built from: the text
they are fine-tuned on (:mod:`~captum_ext.defaults.data`), the fine-tuned
classifiers (:mod:`~captum_ext.defaults.models`), the decoders fitted on a
frozen encoder (:mod:`~captum_ext.defaults.decoders`), the generators and the
digits ViT trained here (:mod:`~captum_ext.defaults.generator`,
:mod:`~captum_ext.defaults.digits`; the generators in a second process on a
first run, :mod:`~captum_ext.defaults.background`) and the on-disk cache that
keeps them (:mod:`~captum_ext.defaults.cache`).

This floor downloads, trains and reads files; the library below it
(:mod:`captum_ext.attr`, :mod:`captum_ext.metrics`, :mod:`captum_ext.adapters`,
:mod:`captum_ext.visualization`) does none of that and never imports it.
"""
