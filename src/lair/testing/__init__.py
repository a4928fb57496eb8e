"""Fixtures and fakes that users of lair may want too: a tiny random model, a calibrated streaming
server, throwaway SSH nodes. Nothing here is imported by lair's own run paths."""
