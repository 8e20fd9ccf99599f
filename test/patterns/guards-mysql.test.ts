import { MARIADB, requireService } from '../support/services.js';
import { mysqlDatabase } from './databases.js';
import { describeGuards } from './guards-contract.js';

describeGuards('MariaDB', await requireService(MARIADB), mysqlDatabase);
