"""Pure readings of a trajectory, below everything that runs or serves: the tool steps an agent took
(`steps`) and how it recovered from failed tool results and injected faults (`recovery`). The fault
recorder (`openforge.faults`) and the analysis layer (`openforge.analysis`) both build on them."""
