#include "distmm/communicator.hpp"

namespace distmm {

const char* name_of(DataType t) {
  return t == DataType::f64 ? "double" : "float";
}

}  // namespace distmm
