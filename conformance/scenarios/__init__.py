"""Driving implementations through scenarios: request data, bounded driving, gates that hold a thread at an event, races, and the systematic exploration of interleavings."""
