"""Tools: inspect, visualize, sign/verify."""
