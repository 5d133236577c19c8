#include <iostream>

#include "distmm/mpi_session.hpp"

int main(int argc, char** argv) {
  distmm::MpiSession session(argc, argv);
  auto world = session.world();
  std::cout << "rank " << world->rank() << " of " << world->size() << "\n";
}
