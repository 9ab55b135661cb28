// The entry point of a compile worker process (compile_worker.h), kept apart from the
// supervisor's header so that main() needs none of the compiler's headers.
//
// Thread-safety: called once, from main(). Errors end the process with a non-zero code.
#pragma once

namespace stitch::daemon {

// The worker process's main: `argv` is stitchd's, starting with "--compile-worker". Serves
// compile requests on fd 3 until the daemon closes it; returns the process exit code (0 when
// the daemon closed the socket, 1 when an answer could not be written).
int RunCompileWorker(int argc, char** argv);

}  // namespace stitch::daemon
