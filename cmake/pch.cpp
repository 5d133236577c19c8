// The translation unit distmm_pch precompiles <armadillo> for (cmake/DistmmWarnings.cmake).
