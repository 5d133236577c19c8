// distmm: the program, over the built-in strategies (distmm/program.hpp).
#include "distmm/program.hpp"

int main(int argc, char** argv) {
  return distmm::run_program(argc, argv);
}
