# distmm_warnings(target): our warning set, as errors, on our own targets only.
function(distmm_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Werror -Wshadow -Wnon-virtual-dtor -Wconversion -Wsign-conversion
    -Wno-missing-field-initializers)  # partial aggregate initialization is intended
endfunction()
