/* torch-fl plugin ABI: the stream group — streams and events.
 *
 * Required. A stream is an in-order queue of work on one device; work on
 * different streams may run concurrently and is ordered only through events.
 * The host creates one stream per device as its default stream and more on
 * demand (torch.Stream). All functions are thread-safe; the host never
 * enqueues onto one stream from two threads at once.
 */
#ifndef TORCH_FL_STREAM_H_
#define TORCH_FL_STREAM_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TFL_Stream_Create_Args {
  size_t struct_size;
  int32_t device;     /* in */
  int32_t priority;   /* in: 0 = normal, negative = higher; may be ignored */
  TFL_Stream* stream; /* out: owned by the caller until TFL_Stream_Destroy */
} TFL_Stream_Create_Args;
#define TFL_Stream_Create_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Stream_Create_Args, stream)
typedef TFL_Error* TFL_Stream_Create(TFL_Stream_Create_Args* args);

/* Completes the stream's pending work, then releases it. The stream is
 * released even when an error (its pending asynchronous error) is returned. */
typedef struct TFL_Stream_Destroy_Args {
  size_t struct_size;
  TFL_Stream* stream; /* in */
} TFL_Stream_Destroy_Args;
#define TFL_Stream_Destroy_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Stream_Destroy_Args, stream)
typedef TFL_Error* TFL_Stream_Destroy(TFL_Stream_Destroy_Args* args);

/* Blocks until all work enqueued on the stream has completed; returns the
 * stream's asynchronous error, if any. */
typedef struct TFL_Stream_Synchronize_Args {
  size_t struct_size;
  TFL_Stream* stream; /* in */
} TFL_Stream_Synchronize_Args;
#define TFL_Stream_Synchronize_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Stream_Synchronize_Args, stream)
typedef TFL_Error* TFL_Stream_Synchronize(TFL_Stream_Synchronize_Args* args);

/* Non-blocking: whether all enqueued work has completed. */
typedef struct TFL_Stream_Query_Args {
  size_t struct_size;
  TFL_Stream* stream; /* in */
  uint8_t idle;       /* out: 1 when all enqueued work has completed */
} TFL_Stream_Query_Args;
#define TFL_Stream_Query_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Stream_Query_Args, idle)
typedef TFL_Error* TFL_Stream_Query(TFL_Stream_Query_Args* args);

/* Work enqueued on `stream` after this call waits until `event` (as last
 * recorded before this call) has completed. Never blocks the host. An event
 * that was never recorded is already complete. */
typedef struct TFL_Stream_WaitEvent_Args {
  size_t struct_size;
  TFL_Stream* stream; /* in */
  TFL_Event* event;   /* in: may belong to another stream or device */
} TFL_Stream_WaitEvent_Args;
#define TFL_Stream_WaitEvent_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Stream_WaitEvent_Args, event)
typedef TFL_Error* TFL_Stream_WaitEvent(TFL_Stream_WaitEvent_Args* args);

/* Event flags. A plugin ignores bits it does not know (a newer host's). */
#define TFL_EVENT_TIMING 1u /* record a timestamp; needed for ElapsedTime */

typedef struct TFL_Event_Create_Args {
  size_t struct_size;
  int32_t device;   /* in */
  uint32_t flags;   /* in: TFL_EVENT_* bits */
  TFL_Event* event; /* out: owned by the caller until TFL_Event_Destroy */
} TFL_Event_Create_Args;
#define TFL_Event_Create_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Event_Create_Args, event)
typedef TFL_Error* TFL_Event_Create(TFL_Event_Create_Args* args);

/* Releases an event; pending waits on it still complete. */
typedef struct TFL_Event_Destroy_Args {
  size_t struct_size;
  TFL_Event* event; /* in */
} TFL_Event_Destroy_Args;
#define TFL_Event_Destroy_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Event_Destroy_Args, event)
typedef TFL_Error* TFL_Event_Destroy(TFL_Event_Destroy_Args* args);

/* Captures the current tail of `stream`: the event completes when all work
 * enqueued on the stream before this call has completed. Re-recording moves
 * the event to the new tail. */
typedef struct TFL_Event_Record_Args {
  size_t struct_size;
  TFL_Event* event;   /* in */
  TFL_Stream* stream; /* in: a stream of the event's device */
} TFL_Event_Record_Args;
#define TFL_Event_Record_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Event_Record_Args, stream)
typedef TFL_Error* TFL_Event_Record(TFL_Event_Record_Args* args);

/* Blocks until the event has completed; returns the recording stream's
 * asynchronous error, if any. */
typedef struct TFL_Event_Synchronize_Args {
  size_t struct_size;
  TFL_Event* event; /* in */
} TFL_Event_Synchronize_Args;
#define TFL_Event_Synchronize_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Event_Synchronize_Args, event)
typedef TFL_Error* TFL_Event_Synchronize(TFL_Event_Synchronize_Args* args);

typedef struct TFL_Event_Query_Args {
  size_t struct_size;
  TFL_Event* event;  /* in */
  uint8_t complete;  /* out: 1 when complete (or never recorded) */
} TFL_Event_Query_Args;
#define TFL_Event_Query_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Event_Query_Args, complete)
typedef TFL_Error* TFL_Event_Query(TFL_Event_Query_Args* args);

/* Milliseconds between two completed events created with TFL_EVENT_TIMING. */
typedef struct TFL_Event_ElapsedTime_Args {
  size_t struct_size;
  TFL_Event* start;    /* in */
  TFL_Event* end;      /* in */
  double milliseconds; /* out */
} TFL_Event_ElapsedTime_Args;
#define TFL_Event_ElapsedTime_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Event_ElapsedTime_Args, milliseconds)
typedef TFL_Error* TFL_Event_ElapsedTime(TFL_Event_ElapsedTime_Args* args);

typedef struct TFL_StreamApi {
  size_t struct_size;
  TFL_Stream_Create* Stream_Create;
  TFL_Stream_Destroy* Stream_Destroy;
  TFL_Stream_Synchronize* Stream_Synchronize;
  TFL_Stream_Query* Stream_Query;
  TFL_Stream_WaitEvent* Stream_WaitEvent;
  TFL_Event_Create* Event_Create;
  TFL_Event_Destroy* Event_Destroy;
  TFL_Event_Record* Event_Record;
  TFL_Event_Synchronize* Event_Synchronize;
  TFL_Event_Query* Event_Query;
  TFL_Event_ElapsedTime* Event_ElapsedTime;
} TFL_StreamApi;
#define TFL_StreamApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_StreamApi, Event_ElapsedTime)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_STREAM_H_ */
