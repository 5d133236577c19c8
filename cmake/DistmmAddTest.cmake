# distmm_add_test(NAME SOURCES src... [MPIRANKS n...] [TIMEOUT seconds] [LABELS l...]
#                 [ARGS a...] [ENVIRONMENT VAR=value...])
#
# Builds one GoogleTest executable linked to distmm::distmm. Without MPIRANKS it is run once,
# directly (label "threads"). With MPIRANKS it is run once per rank count under
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} n ${MPIEXEC_PREFLAGS} <exe>
# as tests named NAME.Nranks, labelled "mpi" and "ranks=N", using the shared MPI gtest main.
# Every test gets a timeout, so a hang fails the test instead of the CI run.
set(DISTMM_MPI_GTEST_MAIN ${CMAKE_CURRENT_LIST_DIR}/../tests/support/mpi_gtest_main.cpp)

function(distmm_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 T "" "TIMEOUT" "SOURCES;MPIRANKS;LABELS;ARGS;ENVIRONMENT")
  if(T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "distmm_add_test(${name}): unknown arguments ${T_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT T_SOURCES)
    message(FATAL_ERROR "distmm_add_test(${name}): SOURCES is required")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()

  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE distmm::distmm distmm_test_support GTest::gtest GTest::gmock)
  distmm_warnings(${name})

  if(NOT T_MPIRANKS)
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "threads;${T_LABELS}")
    return()
  endif()

  target_sources(${name} PRIVATE ${DISTMM_MPI_GTEST_MAIN})
  distmm_add_mpi_runs(${name} ${name} RANKS ${T_MPIRANKS} TIMEOUT ${T_TIMEOUT}
                      LABELS ${T_LABELS} ARGS ${T_ARGS} ENVIRONMENT ${T_ENVIRONMENT})
endfunction()

# distmm_add_mpi_runs(PREFIX TARGET RANKS n... [TIMEOUT s] [LABELS l...] [ARGS a...]
#                     [ENVIRONMENT VAR=value...])
# Registers PREFIX.Nranks: TARGET (an MPI test executable) under mpiexec at each rank count.
function(distmm_add_mpi_runs prefix target)
  cmake_parse_arguments(PARSE_ARGV 2 T "" "TIMEOUT" "RANKS;LABELS;ARGS;ENVIRONMENT")
  if(T_UNPARSED_ARGUMENTS OR NOT T_RANKS)
    message(FATAL_ERROR "distmm_add_mpi_runs(${prefix}): needs RANKS; unknown: ${T_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  foreach(n IN LISTS T_RANKS)
    add_test(NAME ${prefix}.${n}ranks
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${prefix}.${n}ranks PROPERTIES
      TIMEOUT ${T_TIMEOUT} PROCESSORS ${n} LABELS "mpi;ranks=${n};${T_LABELS}")
    if(T_ENVIRONMENT)
      set_tests_properties(${prefix}.${n}ranks PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
    endif()
  endforeach()
endfunction()
