// flemu's TFL_CollectivesApi table (src/comm/api.cpp).
#ifndef FLEMU_COMM_API_H_
#define FLEMU_COMM_API_H_

#include "torch_fl/collectives.h"

namespace flemu::comm {

extern const TFL_CollectivesApi kCollectivesApi;

}  // namespace flemu::comm

#endif  // FLEMU_COMM_API_H_
