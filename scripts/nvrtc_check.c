// nvrtc_check: compiles one CUDA source file to PTX with the NVRTC found
// by dlopen (libnvrtc.so.11.2: Debian's), printing NVRTC's log; the exit
// status is 0 when it compiled. scripts/nvrtc_check.sh runs it on the
// kernel program.
//
//   nvrtc_check FILE [NVRTC options...]
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*create_fn)(void **, const char *, const char *, int, const char **, const char **);
typedef int (*compile_fn)(void *, int, const char **);
typedef int (*log_size_fn)(void *, size_t *);
typedef int (*log_fn)(void *, char *);

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: nvrtc_check FILE [options...]\n");
		return 2;
	}
	void *lib = dlopen("libnvrtc.so.11.2", RTLD_NOW);
	if (!lib) lib = dlopen("libnvrtc.so", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "no NVRTC: %s\n", dlerror());
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *src = malloc(n + 1);
	if (!src || fread(src, 1, n, f) != (size_t)n) {
		fprintf(stderr, "%s: read failed\n", argv[1]);
		return 2;
	}
	src[n] = 0;
	fclose(f);
	const char **opts = malloc(sizeof(char *) * (argc + 2));
	int no = 0;
	opts[no++] = "--gpu-architecture=compute_90";
	opts[no++] = "--std=c++17";
	for (int i = 2; i < argc; i++) opts[no++] = argv[i];
	void *prog;
	if (((create_fn)dlsym(lib, "nvrtcCreateProgram"))(&prog, src, "lowbit_kernels.cu", 0, 0, 0) != 0) {
		fprintf(stderr, "nvrtcCreateProgram failed\n");
		return 2;
	}
	int res = ((compile_fn)dlsym(lib, "nvrtcCompileProgram"))(prog, no, opts);
	size_t size = 0;
	((log_size_fn)dlsym(lib, "nvrtcGetProgramLogSize"))(prog, &size);
	char *log = malloc(size + 1);
	((log_fn)dlsym(lib, "nvrtcGetProgramLog"))(prog, log);
	log[size] = 0;
	fputs(log, stderr);
	printf("nvrtc: %s\n", res == 0 ? "compiled" : "failed");
	return res != 0;
}
