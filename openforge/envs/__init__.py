"""The built-in environments (claw, browser, desktop), task folders (`taskdir`) and the services they run."""
