"""Firmware images: unpacked (``unpack``, carving with ``formats``, reading with ``extractors``) and
inventoried (``inventory``); pure rules where the work is pure. The stage that runs them for one image
against a drop is ``dropscan.stages.firmware_check``.
"""
