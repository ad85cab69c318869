"""The paper's artefacts (the demo, Tables 1-5, Fig. 3, the simulator's validation), each in one shape."""
