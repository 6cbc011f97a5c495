package main

import "syscall"

var (
	errEINVAL = syscall.EINVAL
	errENOMEM = syscall.ENOMEM
)
