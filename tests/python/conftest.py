"""Under mpirun a test that fails on some ranks would leave the others waiting in its next
collective: the first failure ends the whole job (MPI_Abort), after pytest has reported it."""
from mpi4py import MPI


def pytest_runtest_logreport(report):
    if report.failed and MPI.COMM_WORLD.size > 1:
        print(f"\nrank {MPI.COMM_WORLD.rank}: {report.nodeid} failed:\n{report.longreprtext}",
              flush=True)
        MPI.COMM_WORLD.Abort(1)
