# Sourced by the top-level scripts: the environment every distmm run and test uses.
# This OpenBLAS misdetects the CPUs of our machines; keep the kernel it was validated with.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}"
# Open MPI refuses to run as root, and more ranks than cores, unless told it is fine.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
