# Finds Debian's packages and exposes them as targets:
#   MPI::MPI_CXX, Boost::mpi, Threads::Threads, CLI11::CLI11, nlohmann_json::nlohmann_json,
#   ZLIB::ZLIB (CRC-32 of checkpoints),
#   distmm::armadillo (Armadillo's headers calling OpenBLAS directly).
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Boost 1.74 REQUIRED COMPONENTS mpi)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Armadillo REQUIRED)
find_package(OpenBLAS REQUIRED CONFIG)

# Armadillo is used header-only with BLAS/LAPACK taken straight from OpenBLAS (no run-time
# wrapper, no BLAS alternative in between), so openblas_set_num_threads() governs every
# multiply. Sparse solvers (ARPACK, SuperLU) are not used.
add_library(distmm_armadillo INTERFACE)
add_library(distmm::armadillo ALIAS distmm_armadillo)
target_include_directories(distmm_armadillo SYSTEM INTERFACE ${ARMADILLO_INCLUDE_DIRS}
                           ${OpenBLAS_INCLUDE_DIRS})
target_compile_definitions(distmm_armadillo INTERFACE
  ARMA_DONT_USE_WRAPPER ARMA_DONT_USE_ARPACK ARMA_DONT_USE_SUPERLU ARMA_DONT_USE_HDF5
  ARMA_WARN_LEVEL=1 $<$<CONFIG:Release>:ARMA_NO_DEBUG>)
target_link_libraries(distmm_armadillo INTERFACE ${OpenBLAS_LIBRARIES})
