/*
 * Alarms: a message sent to an actor by name at a CLOCK_MONOTONIC deadline, activating
 * the actor if it is not active, in the manner of Orleans reminders.
 *
 * A timer (runtime.h) lives in its actor's state and keeps the actor active until it
 * fires. An alarm lives here, keyed by the actor's name, and keeps nothing active: an
 * actor that only waits for a deadline an hour away can be deactivated and cost about a
 * hundred bytes instead of a whole actor. There is at most one alarm per name; setting it
 * again moves it.
 *
 * An alarm that fires is removed, then sent as a message of the configured type; the
 * receiver frees it with rt_alarm_free(). A send the runtime refuses for now (mailbox
 * full, too many actors, out of memory) is tried again shortly, unless the alarm was set
 * again meanwhile. An alarm delivered late or twice is harmless by construction: it asks
 * the actor to look at its clock, nothing more.
 *
 * One thread fires the alarms. rt_alarm_set() and rt_alarm_cancel() may be called from any
 * thread, including turns; they never call into the runtime.
 */
#ifndef MX_ALARMS_H
#define MX_ALARMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/runtime.h"

struct rt_alarms;

/* Starts the alarm thread for `rt`; fired alarms arrive as messages of type `type`.
 * Returns 0 or an errno value. */
int rt_alarms_start(struct rt_alarms **out, struct rt *rt, uint32_t type);

/* Sets (or moves) the alarm of `name` to `deadline_ns`. Returns RT_OK, RT_EINVAL (name
 * empty or longer than 65535), RT_ENOMEM, or RT_ESHUTDOWN after rt_alarms_stop(). */
int rt_alarm_set(struct rt_alarms *al, const char *name, size_t len, uint64_t deadline_ns);

/* Removes the alarm of `name`, if there is one. */
void rt_alarm_cancel(struct rt_alarms *al, const char *name, size_t len);

/* Frees a fired alarm's message once its receiver is done with it. */
void rt_alarm_free(struct rt_msg *m);

/* Another sign that the receivers are behind, besides a long run queue (for example their
 * writes waiting for the disk): while busy(arg) is true, alarms wait, each batch up to a
 * second. Call before the first alarm is due. */
void rt_alarms_pace(struct rt_alarms *al, bool (*busy)(void *arg), void *arg);

/* While held, no alarm fires (they are kept, and fire when released): for setting many
 * at start before any is sent. */
void rt_alarms_hold(struct rt_alarms *al, bool hold);

/* Makes room for n alarms in the table by name at once, instead of doubling it again and
 * again: for setting many at start. Best effort. */
void rt_alarms_reserve(struct rt_alarms *al, size_t n);

/* Alarms set and not yet fired. */
size_t rt_alarms_count(struct rt_alarms *al);

/* Stops and joins the thread: no alarm is sent after this returns, and rt_alarm_set()
 * refuses. Call before rt_shutdown(), whose turns may still set or cancel alarms. */
void rt_alarms_stop(struct rt_alarms *al);

/* Frees every alarm left and the table. After rt_alarms_stop() and rt_shutdown(). */
void rt_alarms_free(struct rt_alarms *al);

#endif
