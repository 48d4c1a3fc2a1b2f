"""The machine: its hardware, link and memory peaks (calibration), the roofline, the device and clock readings."""
