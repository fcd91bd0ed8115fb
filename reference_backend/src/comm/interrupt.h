// Thrown by a blocking transport call when the communicator's wake
// descriptor fires (abort, or a failure reported by another rank). The
// communicator replaces it with the error that caused the wake-up.
#ifndef FLEMU_COMM_INTERRUPT_H_
#define FLEMU_COMM_INTERRUPT_H_

#include "../errors.h"

namespace flemu::comm {

class Interrupted : public Error {
 public:
  Interrupted() : Error(TFL_ERR_ABORTED, "interrupted") {}
};

}  // namespace flemu::comm

#endif  // FLEMU_COMM_INTERRUPT_H_
