/*
 * The C ABI of the kernel loader (stitch/loader/kernel_loader.h), exported by
 * libstitch_client.so for callers that cannot link C++ (Python ctypes in stitch.cuda).
 *
 * Errors: functions that can fail take a `char** error`. On failure they store there a
 * malloc'ed "CODE: message" string (release it with stitch_free from stitch_client.h) and
 * return NULL or a negative value; on success they leave *error untouched. `error` may be
 * NULL when the caller does not want the text. NULL handles never crash: they are reported
 * as INVALID_ARGUMENT.
 *
 * Ownership: a stitch_loader from stitch_loader_open is released with stitch_loader_close;
 * a stitch_program from stitch_loader_load with stitch_program_free. A program does not
 * depend on the loader that loaded it and may be launched by any loader.
 *
 * Thread-safety: a stitch_loader may be used from many threads at once; a stitch_program
 * may be read and launched from many threads at once. Free each once, after its last use;
 * close a loader only after the work it enqueued has finished, and before the CUDA contexts
 * it launched in are destroyed.
 */
#ifndef STITCH_LOADER_H_
#define STITCH_LOADER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stitch_loader stitch_loader;
typedef struct stitch_program stitch_program;

/*
 * Returns a loader on the CUDA driver library `driver_library_or_null` (NULL selects
 * "libcuda.so.1"), or NULL with *error set when the driver cannot be opened or initialized
 * (UNAVAILABLE: no driver, no GPU, or a build without cuda.h).
 */
stitch_loader* stitch_loader_open(const char* driver_library_or_null, char** error);

/* Releases the loader's modules and device buffers; NULL is ignored. */
void stitch_loader_close(stitch_loader* loader);

/*
 * Returns the program in `bundle` (`len` bytes of a serialized stitch.v1.KernelBundle), or
 * NULL with *error set (INVALID_ARGUMENT naming the kernel) when it is malformed. Touches no
 * device.
 */
stitch_program* stitch_loader_load(stitch_loader* loader, const void* bundle, size_t len,
                                   char** error);

/* Releases a program; NULL is ignored. */
void stitch_program_free(stitch_program* program);

/* Returns how many input pointers stitch_loader_launch takes, or -1 for NULL. */
int stitch_program_num_inputs(const stitch_program* program);

/* Returns how many output pointers stitch_loader_launch takes, or -1 for NULL. */
int stitch_program_num_outputs(const stitch_program* program);

/*
 * Returns the bundle's cache key or target, pointing into the program (valid until
 * stitch_program_free); "" for NULL.
 */
const char* stitch_program_key(const stitch_program* program);
const char* stitch_program_target(const stitch_program* program);

/*
 * Returns 1 when the program is shape-generic, storing the outer extents it serves in *lo
 * and *hi (either may be NULL): each launch then names the run's extent, which is dimension
 * 0 of the inputs stitch_program_outer_parameter lists. Returns 0 for a program of exact
 * shapes, -1 for NULL.
 */
int stitch_program_outer_extent(const stitch_program* program, int64_t* lo, int64_t* hi);

/*
 * Returns the parameter number (input index) of the i-th input whose dimension 0 is the
 * outer extent of a shape-generic program, or -1 when `i` is past the last one or the
 * program is NULL or of exact shapes.
 */
int stitch_program_outer_parameter(const stitch_program* program, int i);

/*
 * Returns the input index whose bytes output `i` is (the graph returns a parameter, or a
 * reshape of one), or -1 when the kernels write output i, `i` is out of range, or the program
 * is NULL. No kernel writes such an output: pass the input's own pointer for it to get it for
 * nothing (a framework returns a view of the input); another buffer gets a copy of the input,
 * enqueued after the kernels.
 */
int stitch_program_output_alias(const stitch_program* program, int i);

/*
 * Enqueues the program's kernels on `stream` (a CUstream as an integer; 0 for the default
 * stream) in the calling thread's current CUDA context, with `inputs` and `outputs` as device
 * pointers. Returns 0 once enqueued, or -1 with *error set: INVALID_ARGUMENT for wrong
 * counts, FAILED_PRECONDITION without a current context or for a device the bundle cannot
 * run on, INTERNAL for a failing driver call.
 */
int stitch_loader_launch(stitch_loader* loader, const stitch_program* program,
                         const uint64_t* inputs, size_t num_inputs, const uint64_t* outputs,
                         size_t num_outputs, uintptr_t stream, char** error);

/*
 * As stitch_loader_launch, after checking the byte size of each buffer: `input_bytes[i]` and
 * `output_bytes[i]` are the sizes of inputs[i] and outputs[i] (0: unknown, not checked).
 * Returns -1 with *error INVALID_ARGUMENT naming the first buffer smaller than the bundle
 * declares for it, before any work is enqueued: the kernels (or the copy into an output that
 * aliases an input) write all of every output.
 */
int stitch_loader_launch_checked(stitch_loader* loader, const stitch_program* program,
                                 const uint64_t* inputs, const uint64_t* input_bytes,
                                 size_t num_inputs, const uint64_t* outputs,
                                 const uint64_t* output_bytes, size_t num_outputs, uintptr_t stream,
                                 char** error);

/*
 * As stitch_loader_launch_checked, at the run's `outer_extent`: a shape-generic program
 * needs one it serves, and checks each varying buffer at that extent; a program of exact
 * shapes needs 0. Returns -1 with *error INVALID_ARGUMENT naming the extent and the range
 * otherwise, before any work is enqueued.
 */
int stitch_loader_launch_at_extent(stitch_loader* loader, const stitch_program* program,
                                   const uint64_t* inputs, const uint64_t* input_bytes,
                                   size_t num_inputs, const uint64_t* outputs,
                                   const uint64_t* output_bytes, size_t num_outputs,
                                   int64_t outer_extent, uintptr_t stream, char** error);

/*
 * Returns which image of a bundle compiled for `target` (e.g. "sm_90") a device of compute
 * capability cc_major.cc_minor would load: 0 the cubin (only when `has_cubin` is nonzero), 1
 * the PTX through the driver's JIT, or -1 with *error set when the device is older than the
 * target (FAILED_PRECONDITION) or the target is malformed (INVALID_ARGUMENT).
 */
int stitch_loader_check_target(const char* target, int has_cubin, int cc_major, int cc_minor,
                               char** error);

#ifdef __cplusplus
}
#endif

#endif /* STITCH_LOADER_H_ */
