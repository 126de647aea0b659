#!/bin/bash
echo ran > out.txt
