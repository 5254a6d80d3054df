/*
 * args.h -- the option parser the foreign-program workloads share: a whole
 * number within bounds, or one line naming the option, the value and the
 * range, and exit status 2.
 */
#ifndef PMLAB_WL_ARGS_H
#define PMLAB_WL_ARGS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * wl_arg_long -- S, the value of option -OPT of PROG (OPT 0: a positional
 * argument), as a whole number from LO to HI; exits with status 2 and one
 * line saying so otherwise
 */
static inline long
wl_arg_long(const char *prog, int opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
		if (opt)
			fprintf(stderr, "%s: -%c '%s' must be a whole number from %ld to %ld\n",
				prog, opt, s, lo, hi);
		else
			fprintf(stderr, "%s: '%s' must be a whole number from %ld to %ld\n",
				prog, s, lo, hi);
		exit(2);
	}
	return v;
}

#endif
