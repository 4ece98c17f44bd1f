"""Tests of the TFJob domain (controller.tfjob): mostly table tests of the pure decision."""
