# distmm_warnings(target): our warning set, as errors, on our own targets only; and the
# precompiled Armadillo header. Parsing <armadillo> took most of a translation unit's compile
# (7.8 of 9.5 s for src/strategies/dp.cpp): distmm_pch precompiles it once and every target of
# ours reuses that. GCC takes a precompiled header only when the macros it was built with are
# defined alike, so distmm_pch has Armadillo's definitions and nothing else.
function(distmm_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Werror -Wshadow -Wnon-virtual-dtor -Wconversion -Wsign-conversion
    -Wno-missing-field-initializers  # partial aggregate initialization is intended
    -Winvalid-pch)
  if(target STREQUAL "distmm_pch")
    target_precompile_headers(distmm_pch PRIVATE <armadillo>)
  else()
    target_precompile_headers(${target} REUSE_FROM distmm_pch)
  endif()
endfunction()
